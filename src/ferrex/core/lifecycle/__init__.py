"""How memories age and leave: staleness (``staleness``, counted per namespace in
``attention``), decay and eviction rules (``decay``), the upkeep that applies them and removes
memories (``upkeep``), the forget and reflect tools, access tracking (``access``)."""
