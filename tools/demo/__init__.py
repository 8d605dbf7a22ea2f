"""The demo cell: etcd, agents, schedulers and the monitor in one command, and its summary."""
