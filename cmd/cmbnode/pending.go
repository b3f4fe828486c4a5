package main

import "errors"

var errPending = errors.New("not built yet in this checkout")

func cmdDaemon(e *env, args []string) error   { return errPending }
func cmdStatus(e *env, args []string) error   { return errPending }
func cmdPeers(e *env, args []string) error    { return errPending }
func cmdRemember(e *env, args []string) error { return errPending }
func cmdRecall(e *env, args []string) error   { return errPending }
func cmdGet(e *env, args []string) error      { return errPending }
func cmdLineage(e *env, args []string) error  { return errPending }
func cmdCGP(e *env, args []string) error      { return errPending }
