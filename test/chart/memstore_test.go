package chart

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
)

// memStore holds synthetic series for Prometheus' PromQL engine, written in the series
// notation of promtool's unit tests ("metric{l="v"} 1x10 0x5 stale"), one sample per
// step from time 0. It is an in-memory storage.Queryable: the engine is Prometheus' own,
// only the TSDB (and its dependency on every cloud SDK) is left out of this module.
type memStore struct {
	series []storage.Series
}

type sample struct {
	t int64
	f float64
}

func (s sample) T() int64                      { return s.t }
func (s sample) ST() int64                     { return 0 }
func (s sample) F() float64                    { return s.f }
func (s sample) H() *histogram.Histogram       { return nil }
func (s sample) FH() *histogram.FloatHistogram { return nil }
func (s sample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s sample) Copy() chunks.Sample           { return s }

func newMemStore(t *testing.T, step time.Duration, lines []string) *memStore {
	t.Helper()
	m := &memStore{}
	for _, l := range lines {
		lbls, vals, err := promQL.ParseSeriesDesc(l)
		if err != nil {
			t.Fatalf("series %q: %v", l, err)
		}
		var ss []chunks.Sample
		for i, v := range vals {
			if v.Omitted {
				continue
			}
			ss = append(ss, sample{t: int64(i) * step.Milliseconds(), f: v.Value})
		}
		m.series = append(m.series, storage.NewListSeries(lbls, ss))
	}
	slices.SortFunc(m.series, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
	return m
}

func (m *memStore) Querier(mint, maxt int64) (storage.Querier, error) { return memQuerier{m}, nil }

type memQuerier struct{ m *memStore }

func (q memQuerier) Select(_ context.Context, _ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	var out []storage.Series
	for _, s := range q.m.series {
		ok := true
		for _, mt := range ms {
			if !mt.Matches(s.Labels().Get(mt.Name)) {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, s)
		}
	}
	return &seriesSet{list: out, i: -1}
}

func (memQuerier) LabelValues(context.Context, string, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, nil
}

func (memQuerier) LabelNames(context.Context, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, nil
}
func (memQuerier) Close() error { return nil }

type seriesSet struct {
	list []storage.Series
	i    int
}

func (s *seriesSet) Next() bool                        { s.i++; return s.i < len(s.list) }
func (s *seriesSet) At() storage.Series                { return s.list[s.i] }
func (s *seriesSet) Err() error                        { return nil }
func (s *seriesSet) Warnings() annotations.Annotations { return nil }

// newEngine is a Prometheus server's engine: the standard parser (no experimental
// functions), a 5 minute lookback.
func newEngine(t *testing.T) *promql.Engine {
	t.Helper()
	e := promql.NewEngine(promql.EngineOpts{
		MaxSamples: 1_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute,
		EnableAtModifier: true, EnableNegativeOffset: true, Parser: parser.NewParser(parser.Options{}),
	})
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// instant evaluates expr at ts and returns its vector.
func instant(t *testing.T, e *promql.Engine, q storage.Queryable, expr string, ts time.Time) promql.Vector {
	t.Helper()
	qry, err := e.NewInstantQuery(context.Background(), q, nil, expr, ts)
	if err != nil {
		t.Fatalf("%q: %v", expr, err)
	}
	defer qry.Close()
	res := qry.Exec(context.Background())
	if res.Err != nil {
		t.Fatalf("%q at %s: %v", expr, ts, res.Err)
	}
	switch v := res.Value.(type) {
	case promql.Vector:
		return v
	case promql.Scalar:
		return promql.Vector{{T: v.T, F: v.V}}
	}
	t.Fatalf("%q: result is %T", expr, res.Value)
	return nil
}

func labelString(l labels.Labels) string {
	var s []string
	l.Range(func(x labels.Label) { s = append(s, fmt.Sprintf("%s=%q", x.Name, x.Value)) })
	return "{" + strings.Join(s, ", ") + "}"
}
