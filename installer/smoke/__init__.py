"""``current smoke``'s tool side: choose the selection, take the smoke mutex, launch
``october.checks.smoke`` with the stack's Python, validate the receipt it writes."""
