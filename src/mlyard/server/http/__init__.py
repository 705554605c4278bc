"""What stands between an HTTP request and a router: the request-body limit, the mapping of
infrastructure failures to answers, Prometheus telemetry, the audit log and the login throttle."""
