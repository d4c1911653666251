"""archiver: the remote-then-local archive of continuity state before a replacement (contract
section 5)."""
