"""The etcd Store (cslab-etcd3) and the embedded etcd server."""
