"""Scheduling by the policy table: the table each worker follows, the pure assignment, the
consumer-group assignor the pool's leader runs, and the rebalance trigger."""
