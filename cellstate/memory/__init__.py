"""The in-memory Store: revisions, leases and watches as etcd has them, on an injected clock."""
