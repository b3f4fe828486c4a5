package main

import (
	"context"
	"io"
	"net"

	"cmbnode/node/daemon"
	"cmbnode/node/mesh"
	"cmbnode/node/metrics"
)

// meshHooks plugs the libp2p mesh and the metrics endpoint into the daemon.
// The daemon starts the mesh before metrics, so the endpoint exports the
// mesh's counters when the mesh runs.
func meshHooks(h *daemon.Hooks) {
	var m *mesh.Mesh
	h.StartMesh = func(ctx context.Context, env daemon.Env) (io.Closer, error) {
		var err error
		m, err = mesh.StartAttached(ctx, env.Node, env.Config, env.Logger)
		if err != nil {
			return nil, err
		}
		return m, nil
	}
	h.StartMetrics = func(ctx context.Context, env daemon.Env, addr string) (io.Closer, error) {
		var src []metrics.Source
		if m != nil {
			src = append(src, m)
		}
		return metrics.Serve(loopbackDefault(addr), metrics.Handler(env.Node, src...), env.Logger.With("component", "metrics"))
	}
}

// loopbackDefault binds a bare ":PORT" to loopback: metrics and the CGP
// HTTP binding serve this machine unless the operator names an interface.
func loopbackDefault(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err == nil && host == "" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}
