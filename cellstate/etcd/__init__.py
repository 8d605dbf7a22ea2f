"""The etcd Store (cslab-etcd3: ``store``, ``watch``, ``wire``) and the embedded etcd server (``cluster``
of ``member`` processes and their ``supervisor``; ``options``, ``binary``, ``ports``)."""
