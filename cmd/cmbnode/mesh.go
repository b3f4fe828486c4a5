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
// mesh's counters (and libp2p's, registered while the mesh starts) when the
// mesh runs.
func meshHooks(h *daemon.Hooks) {
	var m *mesh.Mesh
	reg := metrics.NewRegistry()
	h.StartMesh = func(ctx context.Context, env daemon.Env) (io.Closer, error) {
		c := mesh.ConfigFrom(env.Node, env.Config, env.Logger)
		if env.Config.Metrics != "" {
			c.Metrics = reg
		}
		var err error
		if m, err = mesh.Start(ctx, c); err != nil {
			return nil, err
		}
		env.Node.AttachMesh(m)
		return m, nil
	}
	h.StartMetrics = func(ctx context.Context, env daemon.Env, addr string) (io.Closer, error) {
		var ms metrics.MeshStats
		if m != nil {
			ms = m
		}
		if err := metrics.Register(reg, env.Node, ms); err != nil {
			return nil, err
		}
		log := env.Logger.With("component", "metrics")
		return metrics.Serve(loopbackDefault(addr), metrics.Handler(reg, log), log)
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
