package node

import (
	"context"
	"fmt"
)

// openRecall builds what ranking and admission keep beside the store: the
// kept SVAF verdicts, the author-name index and, with an encoder, the
// dense vectors and their worker.
func (n *Node) openRecall(ctx context.Context, opts Options) error {
	adm, err := newAdmission(opts.SVAF)
	if err != nil {
		return err
	}
	n.adm = adm
	if err := n.loadVerdicts(ctx); err != nil {
		return fmt.Errorf("loading SVAF verdicts: %w", err)
	}
	if err := n.loadNames(ctx); err != nil {
		return fmt.Errorf("loading author names: %w", err)
	}
	if opts.Encoder == nil {
		return nil
	}
	d, err := newDenseIndex(opts.Encoder, opts.Dense, n.st, n.log.With("component", "dense"))
	if err != nil {
		return fmt.Errorf("dense encoder: %w", err)
	}
	if err := d.load(ctx); err != nil {
		return fmt.Errorf("loading dense vectors: %w", err)
	}
	n.dense = d
	go d.run()
	d.wakeUp() // for the backfill
	return nil
}

func (n *Node) closeRecall() {
	if d := n.dense; d != nil {
		select {
		case <-d.stop:
		default:
			close(d.stop)
		}
		<-d.done
	}
}
