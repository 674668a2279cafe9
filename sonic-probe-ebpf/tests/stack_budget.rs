//! Every program's stack frame, read from the compiled objects, stays
//! within what the oldest verifier we run on accepts.
//!
//! 6.1's verifier rounds each frame up to 32 bytes, the bpf_loop
//! callback's (an empty one too), and refuses a program whose frames add
//! up to more than 512 bytes ("combined stack size of 2 calls is 544").
//! One register spill more in sys_exit (488 bytes) passed on 6.18 and
//! failed there, found only in the qemu guest. So each program may take at
//! most 480 bytes: 480 + 32 = 512. This test reads the frame off the ELF
//! at build time, on the host, for every variant object.

use object::{Object, ObjectSection, ObjectSymbol};
use sonic_probe_ebpf::{Variant, PROGRAMS};

/// The most a program's own frame may take.
const FRAME_BUDGET: i64 = 480;

/// How deep below r10 (the frame pointer) the instructions reach: stores
/// and loads through r10, and pointers made from it (`rX = r10; rX += -N`,
/// clang's way of passing a stack buffer to a helper).
fn frame_depth(code: &[u8]) -> i64 {
    let mut deepest = 0i64;
    // Registers that hold r10 plus an offset, as the last write left them.
    let mut alias: [Option<i64>; 11] = [None; 11];
    for insn in code.chunks_exact(8) {
        let op = insn[0];
        let dst = usize::from(insn[1] & 0x0f);
        let src = usize::from(insn[1] >> 4);
        let off = i64::from(i16::from_le_bytes([insn[2], insn[3]]));
        let imm = i64::from(i32::from_le_bytes([insn[4], insn[5], insn[6], insn[7]]));
        let class = op & 0x07;
        match class {
            // LDX: a load from src + off.
            0x01 if src == 10 => deepest = deepest.max(-off),
            // ST, STX: a store to dst + off.
            0x02 | 0x03 if dst == 10 => deepest = deepest.max(-off),
            _ => {}
        }
        let writes_dst = matches!(class, 0x00 | 0x01 | 0x04 | 0x07);
        if class == 0x07 && dst < 11 {
            // ALU64: mov rX, r10 starts an alias; add rX, imm moves it.
            match (op & 0xf0, op & 0x08) {
                (0xb0, 0x08) if src == 10 => alias[dst] = Some(0),
                (0x00, 0x00) if alias[dst].is_some() => {
                    let at = alias[dst].unwrap() + imm;
                    alias[dst] = Some(at);
                    deepest = deepest.max(-at);
                }
                _ => alias[dst] = None,
            }
        } else if writes_dst && dst < 11 {
            alias[dst] = None;
        }
        // A call clobbers r1-r5 (and r0).
        if op == 0x85 {
            alias[..6].fill(None);
        }
    }
    deepest
}

#[test]
fn every_program_of_every_variant_fits_the_oldest_verifiers_stack() {
    let mut checked = 0;
    for task_btf in [true, false] {
        for task_storage in [true, false] {
            for waker_percpu in [true, false] {
                let variant = Variant { task_btf, task_storage, waker_percpu };
                let Some(bytes) = variant.object() else { continue };
                let file = object::File::parse(bytes).expect("the variant object is an ELF");
                for spec in PROGRAMS {
                    let sym = file
                        .symbols()
                        .find(|s| s.name() == Ok(spec.name))
                        .unwrap_or_else(|| panic!("{variant:?}: no symbol {}", spec.name));
                    let section =
                        file.section_by_index(sym.section_index().expect("a defined symbol")).unwrap();
                    let data = section.data().unwrap();
                    let start = sym.address() as usize;
                    let code = &data[start..start + sym.size() as usize];
                    let depth = frame_depth(code);
                    assert!(
                        depth <= FRAME_BUDGET,
                        "{variant:?}: {} has a frame of {depth} bytes; 6.1's verifier allows {FRAME_BUDGET} \
                         (it rounds frames to 32 bytes and the bpf_loop callback takes 32 of 512)",
                        spec.name
                    );
                    assert!(depth > 0 || spec.name != "sys_exit", "the decoder sees sys_exit's frame");
                    checked += 1;
                }
            }
        }
    }
    assert!(checked >= PROGRAMS.len() * 2, "the fast variant and the fallbacks were checked");
}

#[test]
fn the_decoder_reads_stores_loads_and_stack_pointers() {
    // *(u64 *)(r10 - 8) = r1; r2 = *(u64 *)(r10 - 16); r3 = r10; r3 += -96
    let insns: [[u8; 8]; 4] = [
        [0x7b, 0x1a, 0xf8, 0xff, 0, 0, 0, 0],
        [0x79, 0xa2, 0xf0, 0xff, 0, 0, 0, 0],
        [0xbf, 0xa3, 0, 0, 0, 0, 0, 0],
        [0x07, 0x03, 0, 0, 0xa0, 0xff, 0xff, 0xff],
    ];
    assert_eq!(frame_depth(&insns.concat()), 96);
    assert_eq!(frame_depth(&insns[..2].concat()), 16);
}
