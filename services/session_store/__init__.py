"""session-store: atomic session records in Redis and the resume decision (contract section 3)."""
