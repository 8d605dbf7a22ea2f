"""One module per Filter/Scorer plugin; ``schedulers.registry`` maps names to factories."""
