"""Watch-fed replicas of a cell and the placement view schedulers read."""
