"""Evidence: sanitizing at the boundary, digests, bundles and the reports people read."""
