package store

// irregular maps the past tense and past participle of common English
// irregular verbs, and a few irregular plurals, to their base form, which
// the stemmer then stems as it does the base: "went" and "gone" are a term
// with "go", "took" with "take", "children" with "child". Snowball strips
// suffixes only, so without this a question's base form ("When did Mel go
// camping?", "Who did Sam see?") never matches the past tense a memory is
// told in ("we went camping", "we saw them live").
//
// Forms that are as often another word are left out, so they keep their
// own term: bit, bound, ground, lay, rose, shot, wound. The forms of be,
// have and do are stop words already.
var irregular = map[string]string{
	"arose": "arise", "arisen": "arise", "awoke": "awake", "awoken": "awake",
	"beaten": "beat", "became": "become", "began": "begin", "begun": "begin",
	"bent": "bend", "bitten": "bite", "blew": "blow", "blown": "blow",
	"broke": "break", "broken": "break", "brought": "bring", "built": "build",
	"burnt": "burn", "bought": "buy", "caught": "catch", "chose": "choose",
	"chosen": "choose", "came": "come", "crept": "creep", "dealt": "deal",
	"dug": "dig", "drew": "draw", "drawn": "draw", "dreamt": "dream",
	"drank": "drink", "drunk": "drink", "drove": "drive", "driven": "drive",
	"ate": "eat", "eaten": "eat", "fell": "fall", "fallen": "fall",
	"fed": "feed", "felt": "feel", "fought": "fight", "found": "find",
	"flew": "fly", "flown": "fly", "forbade": "forbid", "forbidden": "forbid",
	"forgot": "forget", "forgotten": "forget", "forgave": "forgive",
	"forgiven": "forgive", "froze": "freeze", "frozen": "freeze", "got": "get",
	"gotten": "get", "gave": "give", "given": "give", "went": "go",
	"gone": "go", "grew": "grow", "grown": "grow", "hung": "hang",
	"heard": "hear", "hid": "hide", "hidden": "hide", "held": "hold",
	"kept": "keep", "knelt": "kneel", "knew": "know", "known": "know",
	"laid": "lay", "led": "lead", "leant": "lean", "leapt": "leap",
	"learnt": "learn", "left": "leave", "lent": "lend", "lain": "lie",
	"lit": "light", "lost": "lose", "made": "make", "meant": "mean",
	"met": "meet", "paid": "pay", "proven": "prove", "rode": "ride",
	"ridden": "ride", "rang": "ring", "rung": "ring", "risen": "rise",
	"ran": "run", "said": "say", "saw": "see", "seen": "see",
	"sought": "seek", "sold": "sell", "sent": "send", "sewn": "sew",
	"shook": "shake", "shaken": "shake", "shone": "shine", "shown": "show",
	"shrank": "shrink", "shrunk": "shrink", "sang": "sing", "sung": "sing",
	"sank": "sink", "sunk": "sink", "sat": "sit", "slept": "sleep",
	"slid": "slide", "spoke": "speak", "spoken": "speak", "spent": "spend",
	"spun": "spin", "spat": "spit", "sprang": "spring", "sprung": "spring",
	"stood": "stand", "stole": "steal", "stolen": "steal", "stuck": "stick",
	"stung": "sting", "stank": "stink", "stunk": "stink", "struck": "strike",
	"swore": "swear", "sworn": "swear", "swept": "sweep", "swam": "swim",
	"swum": "swim", "swung": "swing", "took": "take", "taken": "take",
	"taught": "teach", "tore": "tear", "torn": "tear", "told": "tell",
	"thought": "think", "threw": "throw", "thrown": "throw",
	"understood": "understand", "woke": "wake", "woken": "wake",
	"wore": "wear", "worn": "wear", "wept": "weep", "won": "win",
	"wrote": "write", "written": "write",
	"children": "child", "men": "man", "women": "woman", "feet": "foot",
	"teeth": "tooth", "mice": "mouse", "geese": "goose",
}
