"""Selection: which config runs a problem. `dispatch` asks the user DB (`userdb`), the shipped configs,
the nearest tuned neighbour (`neighbors`) and the analytical model (`heuristic`), in that order."""
