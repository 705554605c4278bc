"""What the REST API takes and returns, one module per resource (mirroring `server/routers`):
shared by the server, the typed client, the CLI and the SDK. Pure pydantic; imports only `spec`,
`job_status` and `errors` of mlyard."""
