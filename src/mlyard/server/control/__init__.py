"""The leader's reconcile loop and what it needs: which server leads (`leadership.py`), the
threads it runs (`supervisor.py`), the controller pass (`controller.py`), its pure verdicts
(`judge.py`), holding attempts and locks (`attempts.py`), rows → scheduler values
(`scheduler_input.py`), project limits before each round, and carrying out a start (`launch.py`)."""
