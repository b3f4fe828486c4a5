package main

import "errors"

var errPending = errors.New("not built yet in this checkout")

func cmdCGP(e *env, args []string) error { return errPending }
