"""Built-in procedural tasks: problems with exact answers and worked solutions, made from a seed."""
