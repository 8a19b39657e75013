"""Stage logic: one module per stage (inventory, recipes, review, gate, integrate, ...)."""
