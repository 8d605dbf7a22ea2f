"""Values as schema-versioned msgpack: one module per record type, the envelope, the fast paths (docs/CELLSTATE.md)."""
