package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	"github.com/idemgo/idem"
)

// stateFileVsFloor: StateFile.Run (AtLeastOnce) of new periods of one job
// against the bare durable replace of a JSON document of the same shape
// and size:
//
//	marshal the document (json.MarshalIndent, as idem does)
//	create a temp file in the state file's directory, write, fsync, close
//	rename it over the state file
//	fsync the directory (kept open)
func stateFileVsFloor(ctx context.Context, cfg config) (result, error) {
	dir, cleanup, err := tempDir("statefile")
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	idemDir, floorDir := filepath.Join(dir, "idem"), filepath.Join(dir, "floor")
	for _, d := range []string{idemDir, floorDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return result{}, err
		}
	}

	s, err := idem.OpenStateFile(filepath.Join(idemDir, "state.json"))
	if err != nil {
		return result{}, err
	}
	idemSide := side{ops: func(ctx context.Context, round int) (int, error) {
		keys := roundKeys("report", round, cfg.n)
		for _, k := range keys {
			if err := s.Run(ctx, k, noop); err != nil {
				return 0, err
			}
		}
		return len(keys), nil
	}}

	fl, err := newStateFloor(floorDir)
	if err != nil {
		return result{}, err
	}
	defer fl.close()
	floorSide := side{ops: func(ctx context.Context, round int) (int, error) {
		keys := roundKeys("report", round, cfg.n)
		for _, k := range keys {
			if err := fl.done(k); err != nil {
				return 0, err
			}
		}
		return len(keys), nil
	}}
	return alternate(ctx, cfg, idemSide, floorSide)
}

// floorJob and floorDoc have the shape of idem's state file (statefile.go),
// so the floor writes a document of the same size.
type floorJob struct {
	LastDonePeriod string    `json:"lastDonePeriod"`
	Status         string    `json:"status"`
	PendingPeriod  string    `json:"pendingPeriod"`
	Attempt        int64     `json:"attempt"`
	Failures       int       `json:"failures"`
	Owner          string    `json:"owner,omitempty"`
	Updated        time.Time `json:"updated,omitzero"`
}

type floorDoc struct {
	Version int                  `json:"version"`
	Jobs    map[string]*floorJob `json:"jobs"`
}

type stateFloor struct {
	path string
	dir  *os.File
	doc  floorDoc
}

func newStateFloor(dir string) (*stateFloor, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	return &stateFloor{path: filepath.Join(dir, "state.json"), dir: d,
		doc: floorDoc{Version: 1, Jobs: map[string]*floorJob{}}}, nil
}

func (f *stateFloor) close() { f.dir.Close() }

// done records k's period as the job's last done one, durably.
func (f *stateFloor) done(k idem.Key) error {
	f.doc.Jobs[k.Job] = &floorJob{LastDonePeriod: k.Period, Status: "done", Attempt: 1, Owner: floorOwner, Updated: time.Now()}
	b, err := json.MarshalIndent(f.doc, "", "  ")
	if err != nil {
		return err
	}
	t, err := os.CreateTemp(filepath.Dir(f.path), ".state.json*.tmp")
	if err != nil {
		return err
	}
	if _, err := t.Write(append(b, '\n')); err != nil {
		t.Close()
		os.Remove(t.Name())
		return err
	}
	if err := t.Sync(); err != nil {
		t.Close()
		os.Remove(t.Name())
		return err
	}
	if err := t.Close(); err != nil {
		os.Remove(t.Name())
		return err
	}
	if err := os.Rename(t.Name(), f.path); err != nil {
		os.Remove(t.Name())
		return err
	}
	return f.dir.Sync()
}
