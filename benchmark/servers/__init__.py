"""Start, stop and ask SGLang servers; the host they run on; where a run records them."""
