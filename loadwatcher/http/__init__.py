"""The HTTP face: routes, prepared bodies, OpenAPI, auth and TLS, the status page."""
