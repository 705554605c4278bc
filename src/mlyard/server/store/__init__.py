"""What the server keeps: the database (`db.py`), its rows (`rows.py`) and their Alembic
migrations (`migrations/`), the parsed specs of jobs (`specs.py`) and replicas' log files
(`logfiles.py`)."""
