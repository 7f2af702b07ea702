"""Stage 4, write: dummy and real-weight outputs, the kept extraction script, their verification and the README report."""
