"""What to keep: plain-Python filters (no Beam). Each answers keep (None) or a drop reason."""
