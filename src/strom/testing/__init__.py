"""strom as a test fixture."""
