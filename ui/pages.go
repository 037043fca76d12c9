package ui

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// statuses in the order the pages show them.
var statuses = []idemstore.Status{idemstore.StatusRunning, idemstore.StatusFailed, idemstore.StatusUnknown,
	idemstore.StatusParked, idemstore.StatusDone, idemstore.StatusSkipped}

func parseTemplates() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"t":       fmtTime,
		"short":   idemstore.ShortFingerprint,
		"age":     age,
		"qs":      qs,
		"list":    func(s ...string) []string { return s },
		"isolate": isolate,
		"msgs": func(actions bool, list []idemstore.OutboxRecord) any {
			return struct {
				Actions bool
				List    []idemstore.OutboxRecord
			}{actions, list}
		},
	}
	out := map[string]*template.Template{}
	for _, p := range []string{"overview", "job", "record", "outbox", "search", "confirm", "message"} {
		t, err := template.New(p).Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/"+p+".html")
		if err != nil {
			return nil, err
		}
		out[p] = t
	}
	return out, nil
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// age says how long ago t was, from now, in whole seconds, minutes, hours
// or days ("" for a zero t).
func age(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", max(0, int(d.Seconds())))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// qs builds a query string from name, value pairs, each escaped
// (url.QueryEscape), so that the result is safe in a URL attribute.
func qs(kv ...string) template.URL {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		if b.Len() > 0 {
			b.WriteByte('&')
		}
		b.WriteString(url.QueryEscape(kv[i]) + "=" + url.QueryEscape(kv[i+1]))
	}
	return template.URL(b.String())
}

// page is what every template gets.
type page struct {
	Title    string
	Heading  string   // the page's own words
	Names    []string // store-held names after Heading (a job, a period), each isolated
	Refresh  int      // seconds; 0 for none
	Actions  bool
	HasOut   bool // the store has an outbox
	Now      time.Time
	Data     any
	Status   int
	Messages []string
}

// isolate wraps s, text held by the store, in FIRST STRONG ISOLATE and POP
// DIRECTIONAL ISOLATE: where no element can (a page's title, a message made
// of several parts), it keeps a right-to-left override in s from
// reordering the text after it, as <bdi> does in the templates, which put
// every store-held text in a <bdi> (or an element with dir="auto") of its
// own.
func isolate(s string) string { return "\u2068" + s + "\u2069" }

func (h *Handler) render(w http.ResponseWriter, name string, p page) {
	p.Title = h.o.Title
	p.Actions = h.o.Actions
	_, p.HasOut = h.s.(OutboxStore)
	p.Now = h.o.Now()
	var b bytes.Buffer
	if err := h.tpl[name].ExecuteTemplate(&b, "layout", p); err != nil {
		http.Error(w, "ui: rendering "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if p.Status != 0 {
		w.WriteHeader(p.Status)
	}
	_, _ = b.WriteTo(w)
}

// refuse answers a request it will not serve, with a page that says why.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, code int, why string) {
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="idem"`)
	}
	h.render(w, "message", page{Heading: http.StatusText(code), Status: code, Messages: []string{why}})
}

func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	h.render(w, "message", page{Heading: "Error", Status: http.StatusInternalServerError, Messages: []string{err.Error()}})
}

// Counts counts records by status.
type Counts struct {
	Running, Failed, Unknown, Parked, Done, Skipped, Total int
}

type jobRow struct {
	Job        string
	Counts     Counts
	LastDone   string // the latest done period
	LastDoneAt time.Time
	LastChange time.Time
	Cursor     string
	Latest     string               // the latest period with a record
	Items      idemstore.ItemCounts // the latest period's items (a fan-out), when the store keeps items
	Due        string               // with a schedule: the latest period that has ended
	Late       bool                 // Due is not settled
	Scheduled  bool
	Waiting    string // the next period to settle waits for these upstream periods (Options.After)
}

type overviewData struct {
	Jobs      []*jobRow
	Topics    []idemstore.OutboxTopicStats
	OutErr    string
	Total     Counts
	Attention []idemstore.Record // unknown, parked, failed: what needs a look
}

// attention are the statuses the overview lists under "Needs a look".
var attention = []idemstore.Status{idemstore.StatusUnknown, idemstore.StatusParked, idemstore.StatusFailed}

const attentionLimit = 50

func (c *Counts) addSummary(s idemstore.JobSummary) {
	c.Running += int(s.Counts[idemstore.StatusRunning])
	c.Failed += int(s.Counts[idemstore.StatusFailed])
	c.Unknown += int(s.Counts[idemstore.StatusUnknown])
	c.Parked += int(s.Counts[idemstore.StatusParked])
	c.Done += int(s.Counts[idemstore.StatusDone])
	c.Skipped += int(s.Counts[idemstore.StatusSkipped])
	c.Total += int(s.Total())
}

// overview reads a summary per job and, of the jobs that have records
// that need a look, a page of them: with a store that is an
// idemstore.Summarizer and Pager, no more than that.
func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	rd := newReader(h.s)
	sums, err := rd.summaries(ctx, "")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	d := overviewData{}
	byJob := map[string]*jobRow{}
	for _, s := range sums {
		j := &jobRow{Job: s.Job, Latest: s.Latest, LastDone: s.LastDone, LastDoneAt: s.LastDoneAt, LastChange: s.LastChange}
		j.Counts.addSummary(s)
		d.Total.addSummary(s)
		byJob[s.Job] = j
		d.Jobs = append(d.Jobs, j)
	}
	// What needs a look: each job's latest, in the order of jobs.
	for _, s := range sums {
		if len(d.Attention) == attentionLimit {
			break
		}
		if s.Counts[idemstore.StatusUnknown]+s.Counts[idemstore.StatusParked]+s.Counts[idemstore.StatusFailed] == 0 {
			continue
		}
		recs, err := rd.page(ctx, idemstore.PageQuery{Job: s.Job, Statuses: attention, Limit: attentionLimit - len(d.Attention)})
		if err != nil {
			h.fail(w, r, err)
			return
		}
		d.Attention = append(d.Attention, recs...)
	}
	// Jobs with a schedule but no record yet are shown too.
	for job := range h.o.Schedules {
		if byJob[job] == nil {
			j := &jobRow{Job: job}
			byJob[job] = j
			d.Jobs = append(d.Jobs, j)
		}
	}
	slices.SortFunc(d.Jobs, func(a, b *jobRow) int { return strings.Compare(a.Job, b.Job) })
	now := h.o.Now()
	for _, j := range d.Jobs {
		if js, ok := h.s.(JobStore); ok {
			st, err := js.Job(ctx, j.Job)
			if err != nil {
				h.fail(w, r, err)
				return
			}
			j.Cursor = st.Cursor
		}
		if is, ok := h.s.(ItemStore); ok && j.Latest != "" {
			if j.Items, err = is.CountItems(ctx, idemstore.Key{Job: j.Job, Period: j.Latest}); err != nil {
				h.fail(w, r, err)
				return
			}
		}
		if s := h.o.Schedules[j.Job]; s != nil {
			j.Scheduled = true
			j.Due = idem.LastPeriod(s, now).Name
			rec, ok, err := h.s.Lookup(ctx, idemstore.Key{Job: j.Job, Period: j.Due})
			if err != nil {
				h.fail(w, r, err)
				return
			}
			j.Late = !(ok && (rec.Status == idemstore.StatusDone || rec.Status == idemstore.StatusSkipped)) && !(j.Cursor != "" && j.Due <= j.Cursor)
			if j.Late && len(h.o.After[j.Job]) > 0 {
				if j.Waiting, err = h.waiting(ctx, j.Job, s, j.Cursor, j.Due); err != nil {
					h.fail(w, r, err)
					return
				}
			}
		}
	}
	if ob, ok := h.s.(OutboxStore); ok {
		if d.Topics, err = ob.OutboxStats(ctx); err != nil {
			d.OutErr = err.Error()
		}
	}
	p := page{Heading: "Jobs", Data: d}
	if h.o.Refresh > 0 {
		p.Refresh = max(1, int(h.o.Refresh/time.Second))
	}
	h.render(w, "overview", p)
}

// cell is one period in a job's grid.
type cell struct {
	Period  string
	Label   string // what the cell shows (the day of the month in a month grid)
	Status  string // "" for a period with no record
	Current bool   // the latest due period (with a schedule)
	Cursor  bool   // the job's catch-up cursor
	Window  bool   // after the cursor, up to the due period: what catch-up has still to settle
}

type gridRow struct {
	Label string // a month ("2026-10") or ""
	Cells []cell
}

// HTML is the row's cells as links to their records. A grid has a cell per
// period (10,000 for 27 years of days), so they are written here, each value
// escaped (html.EscapeString; the link's query by url.QueryEscape), rather
// than by the template, which takes several times as long.
func (r gridRow) HTML(job string) template.HTML {
	var b strings.Builder
	q := "record?job=" + url.QueryEscape(job) + "&period="
	for _, c := range r.Cells {
		status, title := c.Status, c.Status
		if title == "" {
			title = "no record"
		}
		b.WriteString(`<a class="cell c-`)
		b.WriteString(html.EscapeString(status))
		if c.Current {
			b.WriteString(" cur")
		}
		if c.Cursor {
			b.WriteString(" cursor")
		}
		if c.Window {
			b.WriteString(" window")
		}
		b.WriteString(`" href="`)
		b.WriteString(html.EscapeString(q + url.QueryEscape(c.Period)))
		b.WriteString(`" title="`)
		b.WriteString(html.EscapeString(c.Period + ": " + title))
		b.WriteString(`" dir="auto">`)
		b.WriteString(html.EscapeString(c.Label))
		b.WriteString("</a>")
	}
	return template.HTML(b.String())
}

type jobData struct {
	Job      string
	Counts   Counts
	Rows     []gridRow
	Cursor   string
	Horizon  string
	Due      string
	Records  []idemstore.Record // newest first, at most jobPage
	Before   string             // the page's records are before this period ("" for the latest)
	Older    string             // when there are older records: the Before of the next page
	Statuses []idemstore.Status
}

// jobPage is how many records a job's page lists; its grid shows the
// months (or, for periods that are not days, the periods) of those.
const jobPage = 200

func validJob(job string) error { return idemstore.ValidateJob(job) }

// job reads the job's summary and one page of its records (the latest, or
// those before ?before=PERIOD), and lays the grid out over that page: with
// a store that is an idemstore.Summarizer and Pager, no more than that.
func (h *Handler) job(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	job := q.Get("job")
	if err := validJob(job); err != nil {
		h.refuse(w, r, http.StatusBadRequest, "job "+strconv.Quote(job)+": "+err.Error())
		return
	}
	d := jobData{Job: job, Statuses: statuses, Before: q.Get("before")}
	if d.Before != "" {
		if err := (idemstore.Key{Job: job, Period: d.Before}).Validate(); err != nil {
			h.refuse(w, r, http.StatusBadRequest, "before: "+err.Error())
			return
		}
	}
	rd := newReader(h.s)
	sums, err := rd.summaries(ctx, job)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	for _, s := range sums {
		d.Counts.addSummary(s)
	}
	if js, ok := h.s.(JobStore); ok {
		st, err := js.Job(ctx, job)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		d.Cursor, d.Horizon = st.Cursor, st.Horizon
	}
	if s := h.o.Schedules[job]; s != nil {
		d.Due = idem.LastPeriod(s, h.o.Now()).Name
	}
	recs, err := rd.page(ctx, idemstore.PageQuery{Job: job, Before: d.Before, Limit: jobPage + 1})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if len(recs) > jobPage {
		recs = recs[:jobPage]
		d.Older = recs[len(recs)-1].Key.Period
	}
	d.Records = recs
	due := d.Due
	if d.Before != "" && due >= d.Before {
		due = "" // a later page's
	}
	if d.Rows, err = h.grid(ctx, rd, job, recs, due, d.Cursor); err != nil {
		h.fail(w, r, err)
		return
	}
	h.render(w, "job", page{Heading: "Job", Names: []string{job}, Data: d})
}

// grid lays out the periods of a page of a job's records (latest first),
// and due when it is after them. Daily periods ("2026-10-27") show as a
// month per row with a column per day: the page's months, whole (the
// records of their other days are read too); any other periods in order,
// as a row of cells.
func (h *Handler) grid(ctx context.Context, rd *reader, job string, recs []idemstore.Record, due, cursor string) ([]gridRow, error) {
	days := len(recs) > 0 || due != ""
	for _, rec := range recs {
		if !isDay(rec.Key.Period) {
			days = false
			break
		}
	}
	if due != "" && !isDay(due) {
		days = false
	}
	if !days || len(recs) == 0 {
		return gridOf(recs, due, cursor, days), nil
	}
	// The page's months whole: the days before its oldest record in that
	// month, and (on an older page) after its latest.
	oldest, latest := recs[len(recs)-1].Key.Period, recs[0].Key.Period
	before, err := rd.page(ctx, idemstore.PageQuery{Job: job, From: oldest[:7] + "-01", Before: oldest, Limit: 64})
	if err != nil {
		return nil, err
	}
	// After latest ("\x00" is in no period), to the month's end.
	after, err := rd.page(ctx, idemstore.PageQuery{Job: job, From: latest + "\x00", Before: latest[:7] + "-32", Limit: 64})
	if err != nil {
		return nil, err
	}
	var month []idemstore.Record
	for _, rec := range slices.Concat(after, recs, before) {
		if isDay(rec.Key.Period) {
			month = append(month, rec)
		}
	}
	return gridOf(month, due, cursor, true), nil
}

func isDay(p string) bool {
	_, err := time.Parse(time.DateOnly, p)
	return err == nil
}

// gridOf lays out recs (latest first) and due: with days, as months of
// days, else as a row of cells in order.
func gridOf(recs []idemstore.Record, due, cursor string, days bool) []gridRow {
	status := map[string]string{}
	for _, rec := range recs {
		status[rec.Key.Period] = string(rec.Status)
	}
	mk := func(p, label string) cell {
		return cell{Period: p, Label: label, Status: status[p], Current: p == due, Cursor: p == cursor,
			Window: cursor != "" && due != "" && p > cursor && p <= due}
	}
	if !days {
		var row gridRow
		for i := len(recs) - 1; i >= 0; i-- {
			row.Cells = append(row.Cells, mk(recs[i].Key.Period, recs[i].Key.Period))
		}
		if due != "" && status[due] == "" {
			row.Cells = append(row.Cells, mk(due, due))
		}
		if len(row.Cells) == 0 {
			return nil
		}
		return []gridRow{row}
	}
	months := map[string]bool{}
	for p := range status {
		months[p[:7]] = true
	}
	if due != "" {
		months[due[:7]] = true
	}
	var ms []string
	for m := range months {
		ms = append(ms, m)
	}
	slices.Sort(ms)
	// Every month from the first to the last, so that a month with no
	// record shows as one.
	if len(ms) > 1 {
		first, _ := time.Parse("2006-01", ms[0])
		last, _ := time.Parse("2006-01", ms[len(ms)-1])
		ms = ms[:0]
		for m := first; !m.After(last); m = m.AddDate(0, 1, 0) {
			ms = append(ms, m.Format("2006-01"))
		}
	}
	slices.Reverse(ms) // the latest month first
	var rows []gridRow
	for _, m := range ms {
		first, _ := time.Parse("2006-01", m)
		n := first.AddDate(0, 1, -1).Day()
		row := gridRow{Label: m}
		for d := 1; d <= n; d++ {
			p := fmt.Sprintf("%s-%02d", m, d)
			row.Cells = append(row.Cells, mk(p, strconv.Itoa(d)))
		}
		rows = append(rows, row)
	}
	return rows
}

type recordData struct {
	Rec        idemstore.Record
	Found      bool
	RequestID  string
	Value      string // the stored value as text ("" when none)
	ValueBytes int
	ValueText  bool
	Cursor     string
	HasItems   bool
	Items      idemstore.ItemCounts
	ItemsErr   string
	Messages   []idemstore.OutboxRecord
	OutErr     string
	CanResolve bool
	CanReset   bool
	CanRunNow  bool // the store keeps wake marks and the period is runnable now
	CanRerun   bool // the store re-runs and the period is done
	Note       string
	HasHistory bool              // the store keeps the history of attempts (idemstore.Historian)
	History    idemstore.History // the period's ended attempts and re-run requests, oldest first
	HistoryErr string
}

func (h *Handler) keyOf(w http.ResponseWriter, r *http.Request) (idemstore.Key, bool) {
	q := r.URL.Query()
	key := idemstore.Key{Job: q.Get("job"), Period: q.Get("period")}
	if err := key.Validate(); err != nil {
		h.refuse(w, r, http.StatusBadRequest, err.Error())
		return key, false
	}
	return key, true
}

func (h *Handler) record(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	key, ok := h.keyOf(w, r)
	if !ok {
		return
	}
	rec, found, err := h.s.Lookup(ctx, key)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	d := recordData{Rec: rec, Found: found, RequestID: key.RequestID()}
	d.Rec.Key = key
	if len(rec.Value) > 0 {
		d.ValueBytes = len(rec.Value)
		d.ValueText = utf8.Valid(rec.Value)
		if d.ValueText {
			d.Value = string(rec.Value)
		}
	}
	if js, ok := h.s.(JobStore); ok {
		st, err := js.Job(ctx, key.Job)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		d.Cursor = st.Cursor
	}
	if is, ok := h.s.(ItemStore); ok && found {
		d.HasItems = true
		if d.Items, err = is.CountItems(ctx, key); err != nil {
			d.ItemsErr = err.Error()
		}
	}
	if ob, ok := h.s.(OutboxStore); ok && found {
		msgs, err := ob.ListOutbox(ctx, idemstore.OutboxFilter{})
		if err != nil {
			d.OutErr = err.Error()
		}
		for _, m := range msgs {
			if m.Key == key {
				d.Messages = append(d.Messages, m)
			}
		}
	}
	if st, err := idemstore.Of(h.s); err == nil && found {
		if hs, ok := st.(idemstore.Historian); ok {
			d.HasHistory = true
			if d.History, err = hs.History(ctx, key); err != nil {
				d.HistoryErr = err.Error()
			}
		}
	}
	d.CanResolve = found && resolvable(rec, h.o.Now())
	d.CanReset = found && (rec.Status == idemstore.StatusParked || rec.Status == idemstore.StatusFailed)
	d.CanRunNow = found && h.lacks(RunNow) == "" && notRunnableNow(rec, h.o.Now()) == ""
	d.CanRerun = found && h.lacks(Rerun) == "" && (rec.Status == idemstore.StatusDone || rec.Status == idemstore.StatusSkipped)
	d.Note = note(rec, found)
	p := page{Names: []string{key.Job, key.Period}, Data: d}
	if !found {
		p.Status = http.StatusNotFound
	}
	h.render(w, "record", p)
}

// resolvable reports whether the store would let the record be resolved
// (idemstore.Resolvable, to done).
func resolvable(rec idemstore.Record, now time.Time) bool {
	return idemstore.Resolvable(rec, true, idemstore.ResolveDone, now) == nil
}

func note(rec idemstore.Record, found bool) string {
	if !found {
		return "no record: this period has not run"
	}
	switch rec.Status {
	case idemstore.StatusUnknown:
		return "its work may or may not have happened: check, then resolve it done or for retry"
	case idemstore.StatusParked:
		return "given up on: fix the cause, then reset it"
	case idemstore.StatusFailed:
		return "the next run after its backoff retries it"
	case idemstore.StatusRunning:
		return "an attempt holds it"
	}
	return ""
}

type outboxData struct {
	Topics   []idemstore.OutboxTopicStats
	Messages []idemstore.OutboxRecord
	Topic    string
	Status   string
	More     bool
}

const outboxLimit = 500

func (h *Handler) outbox(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	ob, ok := h.s.(OutboxStore)
	if !ok {
		h.render(w, "message", page{Heading: "Outbox", Status: http.StatusNotFound,
			Messages: []string{"this store has no outbox (a state file or a store of your own without one): nothing to show"}})
		return
	}
	q := r.URL.Query()
	d := outboxData{Topic: q.Get("topic"), Status: q.Get("status")}
	switch idemstore.OutboxStatus(d.Status) {
	case "", idemstore.OutboxPending, idemstore.OutboxDelivered, idemstore.OutboxParked:
	default:
		h.refuse(w, r, http.StatusBadRequest, "status "+strconv.Quote(d.Status)+": use pending, delivered or parked")
		return
	}
	var err error
	if d.Topics, err = ob.OutboxStats(ctx); err != nil {
		h.fail(w, r, err)
		return
	}
	msgs, err := ob.ListOutbox(ctx, idemstore.OutboxFilter{Topic: d.Topic, Status: idemstore.OutboxStatus(d.Status), Limit: outboxLimit + 1})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if len(msgs) > outboxLimit {
		msgs, d.More = msgs[:outboxLimit], true
	}
	d.Messages = msgs
	h.render(w, "outbox", page{Heading: "Outbox", Data: d})
}

type searchData struct {
	Job, Period string
	Status      string
	Searched    bool // a criterion was given
	Records     []idemstore.Record
	More        bool
	Statuses    []idemstore.Status
}

const searchLimit = 500

func (h *Handler) search(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := searchData{Job: strings.TrimSpace(q.Get("job")), Period: strings.TrimSpace(q.Get("period")), Status: q.Get("status"), Statuses: statuses}
	f := idemstore.Filter{Job: d.Job}
	if d.Job != "" {
		if err := validJob(d.Job); err != nil {
			h.refuse(w, r, http.StatusBadRequest, "job "+strconv.Quote(d.Job)+": "+err.Error())
			return
		}
	}
	if d.Status != "" {
		if !slices.Contains(statuses, idemstore.Status(d.Status)) {
			h.refuse(w, r, http.StatusBadRequest, "status "+strconv.Quote(d.Status)+": not a status")
			return
		}
		f.Status = idemstore.Status(d.Status)
	}
	if d.Job == "" && d.Period == "" && d.Status == "" {
		h.render(w, "search", page{Heading: "Search", Data: d}) // the form alone
		return
	}
	d.Searched = true
	recs, err := h.s.List(r.Context(), f)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	for _, rec := range recs {
		if d.Period != "" && !strings.HasPrefix(rec.Key.Period, d.Period) {
			continue
		}
		if len(d.Records) == searchLimit {
			d.More = true
			break
		}
		d.Records = append(d.Records, rec)
	}
	h.render(w, "search", page{Heading: "Search", Data: d})
}

// ErrActionsOff is the refusal of an action by a handler made without
// Options.Actions.
var ErrActionsOff = errors.New("ui: actions are off (start the page with actions enabled)")

// waiting is what the next period of job to settle (the one after its
// cursor, else due) waits for under Options.After, as a catch-up would
// find it: "" when nothing.
func (h *Handler) waiting(ctx context.Context, job string, s idem.Schedule, cursor, due string) (string, error) {
	next, err := s.Parse(due)
	if err != nil {
		return "", nil
	}
	if c, err := s.Parse(cursor); err == nil && cursor != "" {
		next = s.Next(c)
	}
	var w idem.Waits
	for _, d := range h.o.After[job] {
		for _, name := range d.Mapping.Upstream(next, s) {
			key := idemstore.Key{Job: d.Job, Period: name}
			rec, ok, err := h.s.Lookup(ctx, key)
			if err != nil {
				return "", err
			}
			if !ok || (rec.Status != idemstore.StatusDone && rec.Status != idemstore.StatusSkipped) {
				w = append(w, idem.Wait{Key: key, Status: rec.Status})
			}
		}
	}
	if len(w) == 0 {
		return "", nil
	}
	return next.Name + " waits for " + w.String(), nil
}
