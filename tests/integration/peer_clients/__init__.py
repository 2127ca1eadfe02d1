"""Peer clients run in their own processes: each peer's generated messages register the same
protobuf names as lambdaserve's (and tritonclient's and the kserve SDK's clash), so no two
share a process. Each script takes its calls as JSON and prints the answers as JSON."""
