package main

import "runtime/debug"

func readBuildInfo() (*debug.BuildInfo, bool) { return debug.ReadBuildInfo() }
