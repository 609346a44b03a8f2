//! The allow-list laid out as a search over call numbers.
//!
//! seccompiler emits one chain: for every call the profile names, a comparison of the call number
//! and a few jumps that thread a mismatch on to the next call. Every number the list does not
//! name, and every call near the end of the list, walks the whole chain. That costs each child
//! at the filter's installation, where the kernel checks, converts and JIT-compiles the program
//! and then emulates it once for every call number of both x86 ABIs to build its allow cache
//! (about 0.1 ms a child for the 177-instruction chain; bench-results/sandbox.md).
//!
//! [`compact`] keeps seccompiler as the only compiler of the profile's argument checks and
//! changes where its output sits:
//! - seccompiler compiles the calls allowed by number alone together (five instructions each,
//!   read for the call's number and return value), and every call with argument checks on its
//!   own (the same rules, the same actions), which gives that call a self-contained block: its
//!   own number comparison, its argument checks, and a return on every path;
//! - the program is seccompiler's architecture check, the load of the call number, a binary
//!   search over the sorted numbers that ends in small buckets of `JEQ`s, and the blocks;
//! - a number in no bucket returns the mismatch action; a call allowed by number alone returns
//!   the match action at once; a call with argument checks jumps to its block, with the call
//!   number still in the accumulator, exactly as the chain would have reached it.
//!
//! So the decision for every input is the one seccompiler's own program makes; the tests run both
//! programs in a BPF interpreter over every call number and over argument values at and around
//! each condition's edges. Where seccompiler's output is not in the shape this relies on (a
//! seccompiler that lays out differently), [`compact`] returns `None` and the caller keeps
//! seccompiler's chain.

use seccompiler::{BpfProgram, sock_filter};

// Classic BPF opcodes (linux/bpf_common.h), as the 16-bit `code` of an instruction.
const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JMP_JA: u16 = (libc::BPF_JMP | libc::BPF_JA) as u16;
const JMP_JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JMP_JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

/// The offset of `nr` in `struct seccomp_data`.
const NR_OFFSET: u32 = 0;

/// How many numbers a leaf of the search compares one by one. With the embedded profile's 26
/// calls that is three levels of `JGE` and at most four `JEQ`s to any decision.
const BUCKET: usize = 4;

/// What a call number leads to once matched.
enum Target {
    /// The call is allowed (or killed) whatever its arguments: this return value.
    Return(u32),
    /// Its arguments decide: the index of its block.
    Block(usize),
}

/// One instruction of the search, or a jump to a block whose place is known only at the end.
enum Item {
    Ins(sock_filter),
    JumpToBlock(usize),
}

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// Lay out a filter as a search over call numbers.
///
/// All three inputs are seccompiler's programs for parts of one filter, compiled with the same
/// actions and architecture: `empty` with no rules (its architecture check and the mismatch
/// return), `plain` with the calls that have no argument checks, and `checked` one program per
/// call that has them. Returns `None` when these are not in the shape described in the module
/// docs, or when two of them name one call number.
pub fn compact(
    empty: &[sock_filter],
    plain: &[sock_filter],
    checked: &[BpfProgram],
) -> Option<BpfProgram> {
    let (mismatch, prologue) = empty.split_last()?;
    if mismatch.code != RET_K {
        return None;
    }
    let mismatch = mismatch.k;
    let blocks_of = |program| blocks_of(program, prologue);
    let mut calls: Vec<(u32, Target)> = Vec::with_capacity(checked.len() + 32);
    // The plain calls' blocks, five instructions each, then the mismatch return (or, with no
    // plain calls at all, the empty filter).
    if plain != empty {
        let (last, numbers) = blocks_of(plain)?.split_last()?;
        if *last != stmt(RET_K, mismatch) || !numbers.len().is_multiple_of(5) {
            return None;
        }
        for block in numbers.chunks_exact(5) {
            let (nr, ret) = number_only(block, mismatch)?;
            calls.push((nr, Target::Return(ret)));
        }
    }
    let mut blocks: Vec<&[sock_filter]> = Vec::with_capacity(checked.len());
    for program in checked {
        let block = blocks_of(program)?;
        let first = block.first()?;
        if first.code != JMP_JEQ_K || !self_contained(block) {
            return None;
        }
        calls.push((first.k, Target::Block(blocks.len())));
        blocks.push(block);
    }
    calls.sort_by_key(|(nr, _)| *nr);
    if calls.windows(2).any(|w| w[0].0 == w[1].0) {
        return None;
    }
    if calls.is_empty() {
        return Some(empty.to_vec());
    }

    let mut search = Vec::new();
    emit(&calls, mismatch, &mut search);

    let mut out: BpfProgram = prologue.to_vec();
    out.push(stmt(LD_W_ABS, NR_OFFSET));
    let search_start = out.len();
    let mut block_at = Vec::with_capacity(blocks.len());
    let mut at = search_start + search.len();
    for b in &blocks {
        block_at.push(at);
        at += b.len();
    }
    for (i, item) in search.into_iter().enumerate() {
        out.push(match item {
            Item::Ins(ins) => ins,
            Item::JumpToBlock(b) => {
                let from = search_start + i + 1;
                stmt(JMP_JA, u32::try_from(block_at[b] - from).ok()?)
            }
        });
    }
    for b in blocks {
        out.extend_from_slice(b);
    }
    self_contained(&out).then_some(out)
}

/// The blocks of a program of seccompiler's: after the architecture check (`prologue`), the load
/// of the call number, then the blocks.
fn blocks_of<'a>(
    program: &'a [sock_filter],
    prologue: &[sock_filter],
) -> Option<&'a [sock_filter]> {
    let (load, blocks) = program.strip_prefix(prologue)?.split_first()?;
    (load.code == LD_W_ABS && load.k == NR_OFFSET).then_some(blocks)
}

/// The call number and return value of seccompiler's block for a call allowed by number alone:
/// `JEQ nr,0,1; JA 1; JA 2; RET match; RET mismatch`.
fn number_only(block: &[sock_filter], mismatch: u32) -> Option<(u32, u32)> {
    let [cmp, enter, leave, ret, miss] = block else {
        return None;
    };
    let nr = cmp.k;
    let shaped = *cmp == jump(JMP_JEQ_K, nr, 0, 1)
        && *enter == stmt(JMP_JA, 1)
        && *leave == stmt(JMP_JA, 2)
        && ret.code == RET_K
        && *miss == stmt(RET_K, mismatch);
    shaped.then_some((nr, ret.k))
}

/// Every jump lands inside `program` and the last instruction returns: the program can be moved
/// as a whole, and nothing runs off its end.
fn self_contained(program: &[sock_filter]) -> bool {
    let Some(last) = program.last() else {
        return false;
    };
    if last.code != RET_K {
        return false;
    }
    program.iter().enumerate().all(|(i, ins)| {
        let next = i + 1;
        let inside = |off: usize| next + off < program.len();
        match ins.code & 0x07 {
            c if c == libc::BPF_JMP as u16 => {
                if ins.code == JMP_JA {
                    usize::try_from(ins.k).is_ok_and(inside)
                } else {
                    inside(usize::from(ins.jt)) && inside(usize::from(ins.jf))
                }
            }
            _ => true,
        }
    })
}

/// The search over `calls` (sorted, distinct): halves split by a `JGE` on the first number of
/// the upper half, down to buckets of `JEQ`s.
fn emit(calls: &[(u32, Target)], mismatch: u32, out: &mut Vec<Item>) {
    if calls.len() <= BUCKET {
        // `JEQ n_i` jumps over the rest of the comparisons and the mismatch return to the i-th
        // target: always `calls.len()` instructions ahead.
        let k = calls.len() as u8; // at most BUCKET
        for (nr, _) in calls {
            out.push(Item::Ins(jump(JMP_JEQ_K, *nr, k, 0)));
        }
        out.push(Item::Ins(stmt(RET_K, mismatch)));
        for (_, target) in calls {
            out.push(match target {
                Target::Return(ret) => Item::Ins(stmt(RET_K, *ret)),
                Target::Block(b) => Item::JumpToBlock(*b),
            });
        }
        return;
    }
    let (lower, upper) = calls.split_at(calls.len() / 2);
    let mut below = Vec::new();
    emit(lower, mismatch, &mut below);
    let pivot = upper[0].0;
    match u8::try_from(below.len()) {
        Ok(skip) => out.push(Item::Ins(jump(JMP_JGE_K, pivot, skip, 0))),
        Err(_) => {
            // Too far for a conditional jump: the upper half is reached through a `JA`.
            out.push(Item::Ins(jump(JMP_JGE_K, pivot, 0, 1)));
            out.push(Item::Ins(stmt(
                JMP_JA,
                u32::try_from(below.len()).unwrap_or(u32::MAX),
            )));
        }
    }
    out.extend(below);
    emit(upper, mismatch, out);
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };

    use super::*;
    use crate::sandbox::seccomp;

    const ALU_AND_K: u16 = (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16;
    const JMP_JGT_K: u16 = (libc::BPF_JMP | libc::BPF_JGT | libc::BPF_K) as u16;
    const JMP_JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;

    /// `struct seccomp_data`, little-endian as on both architectures we ship profiles for.
    #[derive(Clone, Copy)]
    struct Data {
        nr: u32,
        arch: u32,
        args: [u64; 6],
    }

    impl Data {
        fn word(&self, offset: u32) -> u32 {
            match offset {
                0 => self.nr,
                4 => self.arch,
                8 | 12 => 0x5555_0000, // instruction pointer: no filter of ours reads it
                16..=63 if offset.is_multiple_of(4) => {
                    let arg = self.args[(offset as usize - 16) / 8];
                    if offset.is_multiple_of(8) {
                        arg as u32
                    } else {
                        (arg >> 32) as u32
                    }
                }
                _ => panic!("load from offset {offset} outside seccomp_data"),
            }
        }
    }

    /// A classic BPF interpreter for the instructions seccompiler and the layout emit; anything
    /// else fails the test, so a new instruction kind is looked at before it is trusted.
    /// `seen` is shown every instruction run.
    fn interpret(program: &[sock_filter], data: &Data, mut seen: impl FnMut(&sock_filter)) -> u32 {
        let mut a: u32 = 0;
        let mut pc = 0usize;
        loop {
            let ins = &program[pc];
            seen(ins);
            pc += 1;
            let branch = |taken: bool| usize::from(if taken { ins.jt } else { ins.jf });
            match ins.code {
                LD_W_ABS => a = data.word(ins.k),
                ALU_AND_K => a &= ins.k,
                JMP_JA => pc += ins.k as usize,
                JMP_JEQ_K => pc += branch(a == ins.k),
                JMP_JGE_K => pc += branch(a >= ins.k),
                JMP_JGT_K => pc += branch(a > ins.k),
                JMP_JSET_K => pc += branch(a & ins.k != 0),
                RET_K => return ins.k,
                code => panic!("instruction code {code:#x} at {} not interpreted", pc - 1),
            }
        }
    }

    fn run(program: &[sock_filter], data: &Data) -> u32 {
        interpret(program, data, |_| {})
    }

    /// A small deterministic generator (xorshift64*), so a failure reproduces.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
    }

    /// What a run of `program` on `data` did with the arguments: the indices it loaded and the
    /// constants it compared or masked them with.
    fn trace(
        program: &[sock_filter],
        data: &Data,
        reads: &mut BTreeSet<usize>,
        constants: &mut BTreeSet<u32>,
    ) {
        let mut on_argument = false;
        interpret(program, data, |ins| match ins.code {
            LD_W_ABS => {
                on_argument = ins.k >= 16;
                if on_argument {
                    reads.insert((ins.k as usize - 16) / 8);
                }
            }
            JMP_JA | RET_K => {}
            _ if on_argument => {
                constants.insert(ins.k);
            }
            _ => {}
        });
    }

    /// 64-bit argument values at and around the edges of `constants`: each constant, its
    /// neighbours and complement, for pairs (a mask and a value) the values the mask lets
    /// through and one bit off, each as the low half under a few high halves, and the constants
    /// as high halves.
    fn edge_values(constants: &BTreeSet<u32>) -> Vec<u64> {
        let mut words: BTreeSet<u32> = [0, 1, u32::MAX, 0x8000_0000].into();
        for &k in constants {
            words.extend([k, k.wrapping_sub(1), k.wrapping_add(1), !k]);
            if constants.len() <= 24 {
                for &m in constants {
                    words.extend([k | !m, k ^ (m & m.wrapping_neg()), k & m]);
                }
            }
        }
        let mut highs: BTreeSet<u32> = [0, 1, u32::MAX, 0x8000_0000].into();
        highs.extend(constants.iter().take(8));
        let mut values = Vec::new();
        for &lo in &words {
            for &hi in &highs {
                values.push(u64::from(hi) << 32 | u64::from(lo));
            }
        }
        values
    }

    /// Run both programs on every call number (both x86 ABIs' ranges, the ends of the number
    /// space) on the right and wrong audit values; then, for every number the program names,
    /// sweep each argument it reads over the edge values of its constants (the others zero, then
    /// random edge values) and try random combinations. Returns how many inputs were compared.
    fn assert_same_decisions(reference: &[sock_filter], laid_out: &[sock_filter]) -> usize {
        assert_decides_as(reference, "layout", |data| run(laid_out, data))
    }

    /// [`assert_same_decisions`] of `reference` against any decision, named `other`.
    fn assert_decides_as(
        reference: &[sock_filter],
        other: &str,
        decide: impl Fn(&Data) -> u32,
    ) -> usize {
        let arch = reference[1].k;
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut compared = 0;
        let mut check = |data: &Data| {
            let (want, got) = (run(reference, data), decide(data));
            assert_eq!(
                want, got,
                "nr {} arch {:#x} args {:x?}: reference {want:#x}, {other} {got:#x}",
                data.nr, data.arch, data.args
            );
            compared += 1;
        };
        let mut numbers: Vec<u32> = (0..1100).collect();
        numbers.extend((0..1100).map(|n| n | 0x4000_0000));
        numbers.extend([
            0x3fff_ffff,
            0x7fff_ffff,
            0x8000_0000,
            u32::MAX - 1,
            u32::MAX,
        ]);
        for &nr in &numbers {
            for a in [arch, arch ^ 1, 0] {
                check(&Data {
                    nr,
                    arch: a,
                    args: [0; 6],
                });
            }
            for _ in 0..4 {
                check(&Data {
                    nr,
                    arch,
                    args: std::array::from_fn(|_| rng.next()),
                });
            }
        }
        let named: BTreeSet<u32> = reference
            .iter()
            .filter(|i| i.code == JMP_JEQ_K && i.k != arch)
            .map(|i| i.k)
            .collect();
        for &nr in &named {
            // What the call's rules read and compare with, found by running them: on zeros,
            // random values, then the edges of what those runs found.
            let (mut reads, mut constants) = (BTreeSet::new(), BTreeSet::new());
            let zero = Data {
                nr,
                arch,
                args: [0; 6],
            };
            trace(reference, &zero, &mut reads, &mut constants);
            for _ in 0..200 {
                let d = Data {
                    nr,
                    arch,
                    args: std::array::from_fn(|_| rng.next()),
                };
                trace(reference, &d, &mut reads, &mut constants);
            }
            for &v in &edge_values(&constants.clone()) {
                for &i in &reads.clone() {
                    let mut d = zero;
                    d.args[i] = v;
                    trace(reference, &d, &mut reads, &mut constants);
                }
            }
            let values = edge_values(&constants);
            let pick = |rng: &mut Rng| values[(rng.next() % values.len() as u64) as usize];
            for &i in &reads {
                for &v in &values {
                    let mut d = zero;
                    d.args[i] = v;
                    check(&d);
                    for &j in &reads {
                        d.args[j] = pick(&mut rng);
                    }
                    d.args[i] = v;
                    check(&d);
                }
            }
            for _ in 0..2000 {
                let mut d = zero;
                for &i in &reads {
                    d.args[i] = pick(&mut rng);
                }
                check(&d);
            }
        }
        compared
    }

    /// seccompiler's program for `rules` (numbers to their rules) with these actions.
    fn backend_chain(
        rules: BTreeMap<i64, Vec<SeccompRule>>,
        mismatch: &SeccompAction,
        matched: &SeccompAction,
        arch: TargetArch,
    ) -> BpfProgram {
        SeccompFilter::new(rules, mismatch.clone(), matched.clone(), arch)
            .and_then(BpfProgram::try_from)
            .expect("seccompiler")
    }

    fn seccompiler_chain(doc: &serde_json::Value, arch: TargetArch) -> BpfProgram {
        let mut map =
            seccompiler::compile_from_json(doc.to_string().as_bytes(), arch).expect("compile");
        map.remove(seccomp::FILTER_NAME).expect("filter")
    }

    #[test]
    fn the_embedded_profiles_decide_as_seccompilers_chain_does() {
        for (arch_name, text) in seccomp::EMBEDDED {
            let arch = TargetArch::try_from(*arch_name).expect("arch");
            let doc: serde_json::Value = serde_json::from_str(text).expect("json");
            let chain = seccompiler_chain(&doc, arch);
            let laid_out = seccomp::compile(text, arch).expect("compile");
            assert!(
                laid_out.len() < chain.len(),
                "{arch_name}: the layout fell back to the chain ({} instructions)",
                laid_out.len()
            );
            let compared = assert_same_decisions(&chain, &laid_out);
            eprintln!(
                "{arch_name}: {} instructions for seccompiler's {}, {compared} inputs compared",
                laid_out.len(),
                chain.len()
            );
        }
    }

    #[test]
    fn both_stages_of_a_spare_decide_as_seccompilers_chains_do() {
        let profile = seccomp::load(None).expect("load");
        let arch = seccomp::host_arch().expect("arch");
        let (first, second) = profile.stages().expect("stages");
        let (first_doc, second_doc) = profile.stage_documents().expect("documents");
        for (laid_out, doc) in [(first, first_doc), (second, second_doc)] {
            let chain = seccompiler_chain(&doc, arch);
            assert!(laid_out.len() < chain.len());
            assert_same_decisions(&chain, &laid_out);
        }
    }

    /// A replacement profile may allow a handover call only under conditions of its own. Both of
    /// a spare's stages in force must then still leave exactly the profile (the kernel takes the
    /// stricter verdict of two filters, a kill before an allow), and the first stage must still
    /// let the handover make the call as it does.
    #[test]
    fn stages_of_a_profile_that_conditions_a_handover_call_leave_exactly_the_profile() {
        let arch = seccomp::host_arch().expect("arch");
        let text = seccomp::embedded_text().expect("an embedded profile for this architecture");
        let base: serde_json::Value = serde_json::from_str(text).expect("json");
        let stricter = |a: u32, b: u32| if (a as i32) < (b as i32) { a } else { b };
        let eq = |index: u8, val: u32| serde_json::json!([{ "index": index, "type": "dword", "op": "eq", "val": val }]);
        let (recvmsg, prlimit64) = (libc::SYS_recvmsg as u32, libc::SYS_prlimit64 as u32);
        for (name, nr, args, handover_args) in [
            (
                "recvmsg",
                recvmsg,
                eq(0, 0),
                [9_u32, 0x7fff_0000, 0x4000_0000, 0, 0, 0],
            ),
            (
                "prlimit64",
                prlimit64,
                eq(1, 7),
                [0, 4, 0, 0x7fff_0000, 0, 0],
            ),
        ] {
            let mut doc = base.clone();
            doc[seccomp::FILTER_NAME]["filter"]
                .as_array_mut()
                .expect("rules")
                .push(serde_json::json!({ "syscall": name, "comment": "test", "args": args }));
            let profile = seccomp::Profile::from_text("test".into(), doc.to_string(), arch)
                .expect("a profile that conditions a handover call");
            let (first, second) = profile.stages().expect("stages");
            let whole = &profile.program;
            let both = |data: &Data| stricter(run(&first, data), run(&second, data));
            let compared = assert_decides_as(whole, &format!("{name}: both stages"), both);
            assert!(compared > 10_000, "{name}: {compared} inputs");
            let audit = whole[1].k;
            let handover = Data {
                nr,
                arch: audit,
                args: handover_args.map(u64::from),
            };
            assert_eq!(
                run(&first, &handover),
                libc::SECCOMP_RET_ALLOW,
                "{name}: the first stage refuses the handover's call"
            );
            assert_ne!(
                run(whole, &handover),
                libc::SECCOMP_RET_ALLOW,
                "{name}: the profile allows the handover's call itself"
            );
        }
    }

    /// Every kind of condition seccompiler compiles, 64-bit ones among them, rules long enough
    /// for its helper jumps, and enough calls that a half of the search is out of a conditional
    /// jump's reach; with both action pairs.
    #[test]
    fn a_wide_filter_with_every_kind_of_condition_decides_as_the_chain_does() {
        let mut rng = Rng(42);
        let ops = |rng: &mut Rng| match rng.next() % 7 {
            0 => SeccompCmpOp::Eq,
            1 => SeccompCmpOp::Ge,
            2 => SeccompCmpOp::Gt,
            3 => SeccompCmpOp::Le,
            4 => SeccompCmpOp::Lt,
            5 => SeccompCmpOp::Ne,
            _ => SeccompCmpOp::MaskedEq(rng.next() >> (rng.next() % 64)),
        };
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
        for nr in 0..400i64 {
            if nr % 3 == 2 {
                continue; // numbers the filter does not name, between ones it does
            }
            let chain = if nr % 5 == 0 {
                (0..1 + rng.next() % 3)
                    .map(|_| {
                        let conditions = (0..1 + rng.next() % if nr == 100 { 40 } else { 3 })
                            .map(|_| {
                                let len = if rng.next().is_multiple_of(2) {
                                    SeccompCmpArgLen::Dword
                                } else {
                                    SeccompCmpArgLen::Qword
                                };
                                let value = match len {
                                    SeccompCmpArgLen::Dword => rng.next() % 64,
                                    SeccompCmpArgLen::Qword => rng.next() >> (rng.next() % 64),
                                };
                                SeccompCondition::new(
                                    (rng.next() % 3) as u8,
                                    len,
                                    ops(&mut rng),
                                    value,
                                )
                                .expect("condition")
                            })
                            .collect();
                        SeccompRule::new(conditions).expect("rule")
                    })
                    .collect()
            } else {
                Vec::new()
            };
            rules.insert(nr, chain);
        }
        let arch = TargetArch::x86_64;
        for (mismatch, matched) in [
            (SeccompAction::KillProcess, SeccompAction::Allow),
            (SeccompAction::Allow, SeccompAction::KillProcess),
        ] {
            let compile = |rules| backend_chain(rules, &mismatch, &matched, arch);
            let chain = compile(rules.clone());
            let empty = compile(BTreeMap::new());
            let (plain, checked): (BTreeMap<_, _>, BTreeMap<_, _>) = rules
                .clone()
                .into_iter()
                .partition(|(_, chain)| chain.is_empty());
            let checked: Vec<BpfProgram> = checked
                .into_iter()
                .map(|call| compile([call].into()))
                .collect();
            let laid_out = compact(&empty, &compile(plain), &checked).expect("the layout applies");
            let reached_by_ja = laid_out.windows(2).any(|w| {
                w[0].code == JMP_JGE_K && w[0].jt == 0 && w[0].jf == 1 && w[1].code == JMP_JA
            });
            assert!(
                reached_by_ja,
                "no half of the search was out of a conditional jump's reach"
            );
            assert_same_decisions(&chain, &laid_out);
        }
    }

    #[test]
    fn an_output_in_another_shape_keeps_the_chain() {
        let arch = seccomp::host_arch().expect("arch");
        let (kill, allow) = (SeccompAction::KillProcess, SeccompAction::Allow);
        let compile = |rules| backend_chain(rules, &kill, &allow, arch);
        let eq = |arg: u8, value: u64| {
            SeccompRule::new(vec![
                SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value)
                    .expect("condition"),
            ])
            .expect("rule")
        };
        let empty = compile(BTreeMap::new());
        let plain = compile([(0, Vec::new()), (1, Vec::new())].into());
        let lseek = compile([(8, vec![eq(2, 0)])].into());
        let mmap = compile([(9, vec![eq(2, 3), eq(3, 34)])].into());
        let laid_out = compact(&empty, &plain, &[lseek.clone(), mmap.clone()]);
        assert!(laid_out.is_some());
        assert!(compact(&empty, &empty, std::slice::from_ref(&lseek)).is_some());
        // Two programs for one number.
        assert!(compact(&empty, &plain, &[lseek.clone(), lseek.clone()]).is_none());
        let read_checked = compile([(0, vec![eq(0, 3)])].into());
        assert!(compact(&empty, &plain, &[read_checked]).is_none());
        // A program that does not start with the architecture check.
        assert!(compact(&empty, &plain, &[lseek[1..].to_vec()]).is_none());
        assert!(compact(&empty, &plain[1..], &[]).is_none());
        // A block with a jump out of itself.
        let mut escaping = mmap.clone();
        let last = escaping.len() - 2;
        escaping[last] = stmt(JMP_JA, 5);
        assert!(compact(&empty, &plain, &[escaping]).is_none());
        // A plain call in another shape (its block entered by another jump).
        let mut reshaped = plain.clone();
        reshaped[5] = stmt(JMP_JA, 0);
        assert!(compact(&empty, &reshaped, &[]).is_none());
        // A call with argument checks given as a plain one.
        assert!(compact(&empty, &mmap, &[]).is_none());
        // A different architecture check than the empty filter's.
        let other = backend_chain([(0, Vec::new())].into(), &kill, &allow, TargetArch::aarch64);
        assert!(compact(&empty, &other, &[]).is_none());
        assert!(compact(&empty, &empty, &[other]).is_none());
    }
}
