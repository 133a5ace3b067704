"""Export for serving."""
