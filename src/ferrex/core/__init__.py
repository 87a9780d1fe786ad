"""Domain rules and the MemoryService. Pure Python: all I/O goes through the ports."""
