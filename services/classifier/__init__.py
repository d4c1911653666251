"""classifier: resume failures to recovery decisions (contract section 4)."""
