"""Self-contained kernel methods: each folder holds a method's spec (pure Python), its NKI body and
its design note; the planner registers them as candidates."""
