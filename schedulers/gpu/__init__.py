"""GPU placement policies (Weng et al., "Beware of Fragmentation", ATC '23): the cell's GPU
machines as arrays (``fleet``), pod shapes and the target workload (``workload``), the
fragmentation measure (``frag``), the six policies that choose a node and the devices inside it
(``policies``), and their adapters to the plugin chain (``plugins``). See docs/GPU.md."""
