"""The console's pages, one module a subject, each a class of handlers that reads and acts
through the services with the project's typed client, like the CLI. The middleware has already
established who is acting and read a POST's form (`request_keys`) before a handler runs; a
handler raises `Failure` for a page it cannot show."""
