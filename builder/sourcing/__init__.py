"""A build's source: this checkout, or an upstream sdist fetched, checked and patched by its recipe."""
