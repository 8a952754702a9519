"""Link shaping: what the kernel offers (probe) and how each backend uses it."""
