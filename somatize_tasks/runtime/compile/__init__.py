"""A plan and its placement compiled into a program of blocks, with the rules a run follows."""
