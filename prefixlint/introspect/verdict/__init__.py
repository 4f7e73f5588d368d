"""What a target came to: per layout and per target, and why it failed (outcome); a build
that failed outside the model becomes a "not verified" note (gaps)."""
