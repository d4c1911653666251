"""NATS helpers shared by every service: connection, streams, request endpoints, consumers."""
