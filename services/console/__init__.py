"""The operator console: Continuity's pages in the browser (`continuity serve console`)."""
