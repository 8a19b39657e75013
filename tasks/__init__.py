"""Stage logic of a run, one package per concept (the table of packages and modules: tasks/README.md)."""
