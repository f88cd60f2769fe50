"""What the tests share that is not a fixture: paths, a real `engy serve`
process, the tiny GGUFs, the clients, the helpers of the family suites."""
