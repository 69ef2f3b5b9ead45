"""What proves the output and is not shipped in it: the test servers, the simulated cluster, the fleet workload."""
