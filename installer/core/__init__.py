"""The small core every command uses: the runner, errors, atomic writes, hashing, paths, the ui, ..."""
