package main

import "context"

func runDemo(ctx context.Context, e *env, args []string) error { return usagef("not yet") }
