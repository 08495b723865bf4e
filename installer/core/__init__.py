"""The small core every command uses: the one runner, errors and exit codes, atomic writes,
hashing, redaction, paths, the stack mutex, the terminal ui, shipped resources."""
