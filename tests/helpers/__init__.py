"""What several test files share, one module per kind (the test files themselves import
nothing from each other)."""
