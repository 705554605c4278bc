"""Background work the leading server runs beside the controller, each a loop the supervisor
starts and stops: resource sampling, idleness policies, environment builds, and the datasets
jobs write."""
