"""Wire protocols: pure translation between JSON and the neutral types."""
