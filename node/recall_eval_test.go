package node

import (
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node/identity"
	"github.com/cmbnode/cmbnode/store"

	"github.com/kljensen/snowball/english"
)

// The recall evaluation: a seeded generator of long conversations between
// two people, remembered turn by turn as the benchmark does
// (focus "Speaker: text", perspective "Speaker, conversation on <date>"),
// with facts planted in turns and questions whose evidence turns are
// labelled. Questions come in four kinds:
//   - lexical: they share words with the answer's turn;
//   - paraphrase: they share no word with the answer's utterance (only,
//     at most, the speaker's name), using synonyms and other words
//     (evalDataset checks this, so a template cannot drift into overlap);
//   - date: "when did …", whose answer lies in the turn's perspective;
//   - multi-session: two facts of one kind, planted in different sessions.
// Each fact's answer turn may follow a lead-in by the other speaker, as in
// conversation, or come out of the blue.

// evalFact is one kind of fact: the lead-in the other speaker may say, the
// owner's answer, and the questions about it. {S} is the owner, {O} the
// other speaker, {V} the fact's value.
type evalFact struct {
	values []string
	leadIn string
	answer string
	lexQ   string
	inflQ  string // shares stems with the answer, no word but stop words
	paraQ  string
	dateQ  string
	multiQ string // asked when the fact is planted twice
}

var evalFacts = []evalFact{
	{values: []string{"Biscuit", "Rocky", "Luna", "Pepper", "Ziggy"},
		leadIn: "Did you end up getting that puppy?", answer: "Yes! We got a dog last month, his name is {V}.",
		lexQ: "What is the name of {S}'s dog?", inflQ: "What are the names of {S}'s dogs?", paraQ: "What did {S} call the new puppy?", dateQ: "When did {S} get a dog?",
		multiQ: "What dogs does {S} have?"},
	{values: []string{"Mercy Hospital", "St. Anne clinic", "Riverside care home", "Northgate hospice"},
		leadIn: "Did anyone hire you yet?", answer: "I started working at {V} as a nurse.",
		lexQ: "Where does {S} work as a nurse?", inflQ: "Where does {S} work?", paraQ: "Which employer hired {S}?", dateQ: "When did {S} start working as a nurse?"},
	{values: []string{"Denver", "Lisbon", "Osaka", "Halifax", "Tucson"},
		leadIn: "Are you still planning to relocate?", answer: "We moved to {V} in the spring.",
		lexQ: "Where did {S} move to?", inflQ: "Where is {S} moving?", paraQ: "Which city is {S}'s new home?", dateQ: "When did {S} move?",
		multiQ: "Which places has {S} moved to?"},
	{values: []string{"cello", "banjo", "ukulele", "saxophone", "violin"},
		leadIn: "Have you picked up any new hobby?", answer: "I've been learning to play the {V} lately.",
		lexQ: "What instrument is {S} learning to play?", inflQ: "Which instrument does {S} learn?", paraQ: "Which musical hobby did {S} pick up?", dateQ: "When was {S} learning to play an instrument?"},
	{values: []string{"The Silent Orchard", "Paper Lanterns", "A Map of Salt", "Winter Harbor"},
		leadIn: "Read any good novel recently?", answer: "I just finished reading {V}, it was amazing.",
		lexQ: "What book did {S} finish reading?", inflQ: "What did {S} read?", paraQ: "Which novel did {S} complete?", dateQ: "When did {S} finish reading a book?",
		multiQ: "What books has {S} finished reading?"},
	{values: []string{"Iceland", "Peru", "Morocco", "Vietnam", "Greece"},
		leadIn: "Where are you going on holiday this year?", answer: "We're flying to {V} for vacation next month.",
		lexQ: "Where is {S} flying for vacation?", inflQ: "Where will {S} fly on vacations?", paraQ: "Which country will {S} visit on holiday?", dateQ: "When is {S} flying for vacation?",
		multiQ: "Where has {S} planned to fly for vacation?"},
	{values: []string{"Boston", "Chicago", "Berlin", "Sydney"},
		leadIn: "How did the big race go?", answer: "I ran my first marathon in {V}!",
		lexQ: "Where did {S} run a marathon?", inflQ: "Where did {S} run marathons?", paraQ: "Which city hosted {S}'s long race?", dateQ: "When did {S} run a marathon?"},
	{values: []string{"lemon", "carrot", "chocolate", "strawberry"},
		leadIn: "What did you make for the celebration?", answer: "I baked a {V} cake for my mom's birthday.",
		lexQ: "What cake did {S} bake for the birthday?", inflQ: "What cakes does {S} bake?", paraQ: "Which dessert did {S} prepare to celebrate mother?", dateQ: "When did {S} bake a cake?"},
	{values: []string{"pottery", "painting", "photography", "woodworking", "salsa"},
		leadIn: "Did you enroll in that course?", answer: "I signed up for a {V} class at the community center.",
		lexQ: "What class did {S} sign up for?", inflQ: "Which classes is {S} signing up?", paraQ: "Which course did {S} enroll in?", dateQ: "When did {S} sign up for a class?",
		multiQ: "What classes has {S} signed up for?"},
	{values: []string{"red", "silver", "green", "blue"},
		leadIn: "How is the new vehicle?", answer: "I finally bought a {V} car.",
		lexQ: "What color car did {S} buy?", inflQ: "What color are {S}'s cars?", paraQ: "What shade is the vehicle {S} purchased?", dateQ: "When did {S} buy a car?"},
	{values: []string{"Mia", "Noah", "Ella", "Theo"},
		leadIn: "How are the children?", answer: "My daughter {V} just turned five.",
		lexQ: "How old is {S}'s daughter?", inflQ: "How old are {S}'s daughters?", paraQ: "What is the name of {S}'s child?", dateQ: "When did {S}'s daughter turn five?"},
	{values: []string{"animal", "homeless", "women's", "food"},
		leadIn: "Are you still doing charity work?", answer: "I've been volunteering at the {V} shelter on weekends.",
		lexQ: "Where does {S} volunteer on weekends?", inflQ: "Where does {S} volunteer?", paraQ: "What charity work does {S} do?", dateQ: "When did {S} volunteer at the shelter?"},
}

// Filler: small talk over a vocabulary that includes the facts' words
// (dog, car, class, cake, city, race…), so that a word of a question is
// rarely found in its answer alone.
var (
	evalNames  = []string{"Caroline", "Melanie", "Jon", "Gina", "Andrew", "Audrey", "James", "John", "Maria", "Joanna", "Nate", "Tim", "Evan", "Sam", "Calvin", "Dave", "Deborah", "Jolene", "Priya", "Omar"}
	evalNouns  = []string{"weekend", "coffee", "garden", "movie", "project", "dinner", "friend", "family", "park", "beach", "music", "concert", "weather", "work", "school", "book", "dog", "car", "class", "cake", "city", "race", "trip", "job", "house", "kitchen", "photo", "painting", "game", "team", "market", "bike", "hike", "lake", "party", "recipe", "show", "song", "store", "office", "morning", "evening", "holiday", "shelter", "hospital", "birthday", "museum", "library", "festival", "neighbor"}
	evalVerbs  = []string{"saw", "loved", "visited", "tried", "finished", "started", "cleaned", "planned", "watched", "found", "shared", "enjoyed", "missed", "fixed", "cooked", "painted", "organized", "joined", "remembered", "showed"}
	evalAdjs   = []string{"great", "lovely", "busy", "quiet", "fun", "exhausting", "beautiful", "strange", "relaxing", "amazing", "tough", "wonderful", "crazy", "cozy", "sunny"}
	evalTimes  = []string{"yesterday", "last week", "this morning", "over the weekend", "a few days ago", "last night", "recently", "today"}
	evalFiller = []string{
		"I {verb} the {adj} {noun} {time}.",
		"That sounds {adj}! How was the {noun}?",
		"We {verb} a {noun} {time}, it was {adj}.",
		"Honestly the {noun} has been {adj} lately.",
		"Thanks for telling me about the {noun}, {O}.",
		"Did you ever {verb2} the {noun} with your {noun2}?",
		"My {noun2} {verb} the {noun} {time}.",
		"I can't wait for the {noun} next week.",
		"Oh nice, I love a good {noun}.",
		"It was {adj}, we {verb} the {noun} and then the {noun2}.",
		"How have you been, {O}? Anything new with the {noun}?",
		"Same here, the {noun} kept me {adj} all week.",
	}
	evalVerbs2 = []string{"share", "try", "visit", "fix", "plan", "finish", "show", "clean"}
)

// evalTurn is one turn: who says what, and in which session.
type evalTurn struct {
	speaker, text string
	session       int // index over the whole data set
	date          time.Time
}

type evalQuestion struct {
	kind     string // lexical, paraphrase, date, multi
	text     string
	evidence []int // turn indexes
	// indirect: no evidence turn shares a word with the question but
	// stop words and the speakers' names (a reply found, if at all,
	// through the turn it replies to). Scored also as kind "indirect".
	indirect bool
}

type evalDataset struct {
	turns     []evalTurn
	questions []evalQuestion
}

// newEvalDataset generates convs conversations of sessions sessions each.
func newEvalDataset(seed uint64, convs, sessions int) (*evalDataset, error) {
	rng := mrand.New(mrand.NewPCG(seed, 19))
	d := &evalDataset{}
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	fill := func(tmpl, s, o, v string) string {
		r := strings.NewReplacer("{S}", s, "{O}", o, "{V}", v, "{verb}", pick(evalVerbs), "{verb2}", pick(evalVerbs2),
			"{adj}", pick(evalAdjs), "{noun}", pick(evalNouns), "{noun2}", pick(evalNouns), "{time}", pick(evalTimes))
		return r.Replace(tmpl)
	}
	session := 0
	for c := range convs {
		perm := rng.Perm(len(evalNames))
		names := [2]string{evalNames[perm[0]], evalNames[perm[1]]}
		date := time.Date(2023, time.Month(1+rng.IntN(12)), 1+rng.IntN(28), 0, 0, 0, 0, time.UTC)
		// The facts this conversation plants: a fact kind, an owner, a
		// session; some kinds twice, in two sessions, for a multi question.
		type plant struct {
			fact     int
			owner    int
			value    string
			sess     int
			multiOf  int // index in plants of the first of a pair, or -1
			turn     int // answer turn, once placed
			hasLeadI bool
		}
		var plants []plant
		for f := range evalFacts {
			owner := rng.IntN(2)
			vals := rng.Perm(len(evalFacts[f].values))
			plants = append(plants, plant{fact: f, owner: owner, value: evalFacts[f].values[vals[0]], sess: rng.IntN(sessions), multiOf: -1, hasLeadI: rng.IntN(10) < 7})
			if evalFacts[f].multiQ != "" && rng.IntN(2) == 0 {
				s2 := (plants[len(plants)-1].sess + 1 + rng.IntN(sessions-1)) % sessions
				plants = append(plants, plant{fact: f, owner: owner, value: evalFacts[f].values[vals[1]], sess: s2, multiOf: len(plants) - 1, hasLeadI: rng.IntN(10) < 7})
			}
		}
		for s := range sessions {
			date = date.AddDate(0, 0, 3+rng.IntN(20))
			n := 10 + rng.IntN(10)
			var mine []int
			for i := range plants {
				if plants[i].sess == s {
					mine = append(mine, i)
				}
			}
			// Positions (in filler turns) after which each fact is said.
			at := map[int][]int{}
			for _, i := range mine {
				p := rng.IntN(n)
				at[p] = append(at[p], i)
			}
			speaker := rng.IntN(2)
			say := func(who int, text string) int {
				d.turns = append(d.turns, evalTurn{speaker: names[who], text: text, session: session, date: date})
				return len(d.turns) - 1
			}
			for p := range n {
				say(speaker, fill(pick(evalFiller), names[speaker], names[1-speaker], ""))
				speaker = 1 - speaker
				for _, i := range at[p] {
					pl := &plants[i]
					f := evalFacts[pl.fact]
					if pl.hasLeadI {
						say(1-pl.owner, fill(f.leadIn, names[pl.owner], names[1-pl.owner], pl.value))
					}
					pl.turn = say(pl.owner, fill(f.answer, names[pl.owner], names[1-pl.owner], pl.value))
					speaker = 1 - pl.owner
				}
			}
			session++
		}
		for i, pl := range plants {
			f := evalFacts[pl.fact]
			s, o := names[pl.owner], names[1-pl.owner]
			ans := fill(f.answer, s, o, pl.value)
			if pl.multiOf >= 0 {
				first := plants[pl.multiOf]
				d.questions = append(d.questions, evalQuestion{kind: "multi", text: fill(f.multiQ, s, o, ""), evidence: []int{first.turn, pl.turn}})
				continue
			}
			paired := i+1 < len(plants) && plants[i+1].multiOf == i
			if !paired {
				d.questions = append(d.questions,
					evalQuestion{kind: "lexical", text: fill(f.lexQ, s, o, ""), evidence: []int{pl.turn}},
					evalQuestion{kind: "date", text: fill(f.dateQ, s, o, ""), evidence: []int{pl.turn}})
			}
			para := fill(f.paraQ, s, o, "")
			if w := sharedWord(para, ans, s); w != "" {
				return nil, fmt.Errorf("conversation %d: paraphrase %q shares %q with its answer %q", c, para, w, ans)
			}
			infl := fill(f.inflQ, s, o, "")
			if w := sharedExact(infl, ans, s); w != "" || sharedWord(infl, ans, s) == "" {
				return nil, fmt.Errorf("conversation %d: inflection %q shares the word %q, or no stem, with its answer %q", c, infl, w, ans)
			}
			if !paired {
				d.questions = append(d.questions,
					evalQuestion{kind: "paraphrase", text: para, evidence: []int{pl.turn}},
					evalQuestion{kind: "inflection", text: infl, evidence: []int{pl.turn}})
			}
		}
	}
	return d, nil
}

// sharedWord is a word of a (other than name) that is also in b, or whose
// stem is a stem of b's, or "": a paraphrase shares no word, stop words
// included, and not even an inflection.
func sharedWord(a, b, name string) string {
	stems := map[string]bool{}
	for _, w := range store.Tokenize(b) {
		stems[english.Stem(w, true)] = true
	}
	for _, w := range store.Tokenize(a) {
		st := english.Stem(w, true)
		if stems[st] && st != english.Stem(strings.ToLower(name), true) {
			return w
		}
	}
	return ""
}

// sharedExact is a word of a, other than name and stop words, that is also
// a word of b, or "".
func sharedExact(a, b, name string) string {
	words := map[string]bool{}
	for _, w := range store.Tokenize(b) {
		words[w] = true
	}
	for _, w := range store.Tokenize(a) {
		if words[w] && !english.IsStopWord(w) && w != strings.ToLower(name) && w != strings.ToLower(name)+"'s" {
			return w
		}
	}
	return ""
}

// evalFields are a turn's fields as the benchmark remembers them.
func evalFields(t evalTurn) cmb.Fields {
	var f cmb.Fields
	for i := range f {
		f[i].Text = "neutral"
	}
	f[cmb.Focus].Text = t.speaker + ": " + t.text
	f[cmb.Perspective].Text = t.speaker + ", conversation on " + t.date.Format("2 January 2006")
	return f
}

// evalScores are the figures of one ranking over one data set.
type evalScores struct {
	recall5, recall10, mrr float64
	byKind                 map[string]float64 // recall@10 by question kind
}

// score averages a ranking's figures over the questions; rankOf gives
// each question's ranked turn indexes (10 or fewer).
func (d *evalDataset) score(rankOf func(q evalQuestion) ([]int, error)) (evalScores, error) {
	s := evalScores{byKind: map[string]float64{}}
	count := map[string]int{}
	for _, q := range d.questions {
		got, err := rankOf(q)
		if err != nil {
			return s, err
		}
		found5, found10, rr := 0, 0, 0.0
		for _, e := range q.evidence {
			if i := slices.Index(got, e); i >= 0 {
				found10++
				if i < 5 {
					found5++
				}
				if rr == 0 || 1/float64(i+1) > rr {
					rr = 1 / float64(i+1)
				}
			}
		}
		n := float64(len(q.evidence))
		s.recall5 += float64(found5) / n
		s.recall10 += float64(found10) / n
		s.mrr += rr
		s.byKind[q.kind] += float64(found10) / n
		count[q.kind]++
		if q.indirect {
			s.byKind["indirect"] += float64(found10) / n
			count["indirect"]++
		}
	}
	nq := float64(len(d.questions))
	s.recall5, s.recall10, s.mrr = s.recall5/nq, s.recall10/nq, s.mrr/nq
	for k, c := range count {
		s.byKind[k] /= float64(c)
	}
	return s, nil
}

// openEvalNode opens a fresh node in a temporary home.
func openEvalNode(tb testing.TB) *Node {
	tb.Helper()
	home := tb.TempDir()
	id, err := identity.Create(home, "eval", rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	n, err := Open(Options{Home: home, Group: "eval", Identity: id})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { n.Close() })
	return n
}

// remember stores the data set's turns in n, each chained to the previous
// turn of its session if chained, and returns each turn's key.
func (d *evalDataset) remember(ctx context.Context, n *Node, chained bool) (map[string]int, error) {
	byKey := make(map[string]int, len(d.turns))
	prev := ""
	for i, t := range d.turns {
		in := RememberInput{Fields: evalFields(t)}
		if chained && i > 0 && d.turns[i-1].session == t.session {
			in.Parents = []string{prev}
		}
		res, err := n.Remember(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("turn %d: %w", i, err)
		}
		byKey[res.Key] = i
		prev = res.Key
	}
	return byKey, nil
}

// evalNew is the new ranking's figures: each question asked through
// node.Recall with limit 10.
func (d *evalDataset) evalNew(ctx context.Context, n *Node, byKey map[string]int) (evalScores, error) {
	return d.score(func(q evalQuestion) ([]int, error) {
		hits, err := n.Recall(ctx, q.text, 10)
		if err != nil {
			return nil, err
		}
		out := make([]int, len(hits))
		for i, h := range hits {
			out[i] = byKey[h.Key]
		}
		return out, nil
	})
}

// evalOld is the old ranking's figures over the same turns. Lineage played
// no part in it, so flat and chained score alike.
func (d *evalDataset) evalOld(now time.Time) (evalScores, error) {
	x := newOldBM25()
	for _, t := range d.turns {
		f := evalFields(t)
		var texts [7]string
		for i := range texts {
			texts[i] = f[i].Text
		}
		x.add(texts, now.UnixMilli())
	}
	return d.score(func(q evalQuestion) ([]int, error) { return x.search(q.text, 10, now.UnixMilli()), nil })
}

// TestRecallEvalBeatsOldRanking holds the new ranking above the old one on
// several seeds of the evaluation set, flat and chained, with margins
// well inside what the benchmark measures (BenchmarkRecallEval prints
// the figures), so that a regression in analysis or ranking fails here.
func TestRecallEvalBeatsOldRanking(t *testing.T) {
	if testing.Short() {
		t.Skip("stores a few thousand records")
	}
	ctx := context.Background()
	for _, seed := range []uint64{1, 2} {
		d, err := newEvalDataset(seed, 3, 6)
		if err != nil {
			t.Fatal(err)
		}
		old, err := d.evalOld(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		for _, chained := range []bool{false, true} {
			n := openEvalNode(t)
			byKey, err := d.remember(ctx, n, chained)
			if err != nil {
				t.Fatal(err)
			}
			got, err := d.evalNew(ctx, n, byKey)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("seed %d chained=%t: recall@10 old %.3f new %.3f (%v)", seed, chained, old.recall10, got.recall10, got.byKind)
			if got.recall10 < old.recall10+0.05 {
				t.Errorf("seed %d chained=%t: new recall@10 %.3f vs old %.3f", seed, chained, got.recall10, old.recall10)
			}
			// A paraphrase shares no word with its answer: only the
			// thread (the lead-in before it) can find it.
			if chained && got.byKind["paraphrase"] < 0.3 {
				t.Errorf("seed %d chained: paraphrase recall@10 %.3f; lineage is not lending evidence", seed, got.byKind["paraphrase"])
			}
		}
	}
}

// BenchmarkRecallEval prints the evaluation: recall@5, recall@10 and MRR
// of the old and new rankings, flat and chained, averaged over three
// seeds of ten conversations each (~3,000 turns, ~450 questions a seed).
// The time per op is one pass of every question through node.Recall.
func BenchmarkRecallEval(b *testing.B) {
	ctx := context.Background()
	seeds := []uint64{1, 2, 3}
	for _, chained := range []bool{false, true} {
		name := "flat"
		if chained {
			name = "chained"
		}
		b.Run(name, func(b *testing.B) {
			var oldSum, newSum evalScores
			kinds := map[string]float64{}
			for range b.N {
				oldSum, newSum = evalScores{}, evalScores{}
				clear(kinds)
				for _, seed := range seeds {
					b.StopTimer()
					d, err := newEvalDataset(seed, 10, 12)
					if err != nil {
						b.Fatal(err)
					}
					old, err := d.evalOld(time.Now())
					if err != nil {
						b.Fatal(err)
					}
					n := openEvalNode(b)
					byKey, err := d.remember(ctx, n, chained)
					if err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					got, err := d.evalNew(ctx, n, byKey)
					if err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					b.Logf("seed %d: %d turns, %d questions; recall@10 old %.3f new %.3f; new by kind %v", seed, len(d.turns), len(d.questions), old.recall10, got.recall10, got.byKind)
					oldSum.recall5 += old.recall5 / float64(len(seeds))
					oldSum.recall10 += old.recall10 / float64(len(seeds))
					oldSum.mrr += old.mrr / float64(len(seeds))
					newSum.recall5 += got.recall5 / float64(len(seeds))
					newSum.recall10 += got.recall10 / float64(len(seeds))
					newSum.mrr += got.mrr / float64(len(seeds))
					for k, v := range got.byKind {
						kinds[k] += v / float64(len(seeds))
					}
					n.Close()
					b.StartTimer()
				}
			}
			b.ReportMetric(oldSum.recall5, "old-recall@5")
			b.ReportMetric(oldSum.recall10, "old-recall@10")
			b.ReportMetric(oldSum.mrr, "old-MRR")
			b.ReportMetric(newSum.recall5, "new-recall@5")
			b.ReportMetric(newSum.recall10, "new-recall@10")
			b.ReportMetric(newSum.mrr, "new-MRR")
			for k, v := range kinds {
				b.ReportMetric(v, "new-recall@10-"+k)
			}
		})
	}
}
