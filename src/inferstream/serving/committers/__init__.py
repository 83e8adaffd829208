"""How a worker commits a partition's finished tasks: `exactly_once` (the default) or
`at_least_once`, both behind `base.PartitionCommitter`."""
