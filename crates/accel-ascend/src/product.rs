//! The 950's product form and its HCCL topology file (spec/ascend.md §4.4, addendum A2–A4):
//! what `HCCL_TOPO_FILE_PATH` names for a grant of 950 NPUs. Pure.
//!
//! The described system asks its driver library for the mainboard id and the super-pod type;
//! here both come from `npu-smi`: `-t board`'s `Main Board ID` (whose class is bits 7–5 on the
//! 950: 0 POD, 1 A+K, 2 A+X, 3 CARD, 6 equipment) and `-t spod-info`'s `Super Pod Type` (the
//! codes of §4.4's table). Board ids of other generations reuse the same numbers (`0x68` is also
//! a 310P card's board id, HAZARDS item 22), so the board is read as a 950 mainboard only when
//! its PCI device id is the 950's (`0xD806`; the kernel's when the board prints none).
//!
//! A card (class 3) is named by its mainboard id: `0x68` one NPU, `0x6C` four. A server or pod
//! board is named by its super-pod type, which must fit its class (pod types on a POD board,
//! server types on an A+K or A+X board). Whatever does not resolve to exactly one form gives no
//! file and an [`Unresolved`] reason, never a guess:
//! - no 950 PCI device id, no `Main Board ID`, no `Super Pod Type` where one is needed;
//! - super-pod type `0`: the 8P server's code, and also MindCluster's "abnormal" default, so it
//!   cannot tell an 8P server from a type never read (addendum A4);
//! - a 2P card (`0x6A` in the driver, `0x6B` in MindCluster, and no topology file in §4.4's
//!   table for either);
//! - a class and a type that disagree, or a card's `(<n>P)` suffix or type that disagrees with
//!   its id; an equipment board, a class or code no table has.

use std::fmt;

use crate::npusmi::{SpodFacts, SpodInfo};

/// The variable the HCCL library reads its fabric topology from.
pub const TOPO_ENV: &str = "HCCL_TOPO_FILE_PATH";
/// The 950's PCI device id (addendum A3).
pub const PCI_DEVICE_950: u32 = 0xd806;

/// A 950 product form (spec §4.4's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProductType {
    Server8p,
    Pod1d,
    Pod2d,
    Server16p,
    Server32p,
    Card1p,
    Card4p,
}

const ALL: [ProductType; 7] = [
    ProductType::Server8p,
    ProductType::Pod1d,
    ProductType::Pod2d,
    ProductType::Server16p,
    ProductType::Server32p,
    ProductType::Card1p,
    ProductType::Card4p,
];

impl ProductType {
    /// The form as spec §4.4 spells it (`server-16p`), the inventory's `productType`.
    pub fn name(self) -> &'static str {
        match self {
            ProductType::Server8p => "server-8p",
            ProductType::Pod1d => "pod-1d",
            ProductType::Pod2d => "pod-2d",
            ProductType::Server16p => "server-16p",
            ProductType::Server32p => "server-32p",
            ProductType::Card1p => "card-1p",
            ProductType::Card4p => "card-4p",
        }
    }

    /// The `Super Pod Type` code of the form.
    pub fn code(self) -> u32 {
        match self {
            ProductType::Server8p => 0,
            ProductType::Pod1d => 1,
            ProductType::Pod2d => 2,
            ProductType::Server16p => 3,
            ProductType::Server32p => 4,
            ProductType::Card1p => 5,
            ProductType::Card4p => 6,
        }
    }

    /// The HCCL topology file of the form (a path inside the container, where the Ascend
    /// Docker Runtime mounts the driver's directory; never stat'ed, as the spec does).
    pub fn topology_file(self) -> &'static str {
        match self {
            ProductType::Server8p => "/usr/local/Ascend/driver/topo/950/atlas_850_1.json",
            ProductType::Pod1d => "/usr/local/Ascend/driver/topo/950/atlas_950_1.json",
            ProductType::Pod2d => "/usr/local/Ascend/driver/topo/950/atlas_950_2.json",
            ProductType::Server16p => "/usr/local/Ascend/driver/topo/950/atlas_850_2.json",
            ProductType::Server32p => "/usr/local/Ascend/driver/topo/950/atlas_850_3.json",
            ProductType::Card1p => "/usr/local/Ascend/driver/topo/950/atlas_350_1.json",
            ProductType::Card4p => "/usr/local/Ascend/driver/topo/950/atlas_350_3.json",
        }
    }

    /// The form [`ProductType::name`] spells `name`.
    pub fn from_name(name: &str) -> Option<ProductType> {
        ALL.into_iter().find(|p| p.name() == name)
    }

    /// The form of a `Super Pod Type` code.
    pub fn from_code(code: u32) -> Option<ProductType> {
        ALL.into_iter().find(|p| p.code() == code)
    }
}

/// The class of a 950 mainboard id: its bits 7–5 (addendum A3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoardClass {
    Pod,
    AplusK,
    AplusX,
    Card,
    Equipment,
    /// A class no table names (4, 5, 7).
    Other(u32),
}

impl BoardClass {
    pub fn of(main_board: u32) -> BoardClass {
        match (main_board >> 5) & 0x7 {
            0 => BoardClass::Pod,
            1 => BoardClass::AplusK,
            2 => BoardClass::AplusX,
            3 => BoardClass::Card,
            6 => BoardClass::Equipment,
            n => BoardClass::Other(n),
        }
    }

    fn name(self) -> String {
        match self {
            BoardClass::Pod => "a POD board".into(),
            BoardClass::AplusK => "an A+K server board".into(),
            BoardClass::AplusX => "an A+X server board".into(),
            BoardClass::Card => "a card".into(),
            BoardClass::Equipment => "an equipment board".into(),
            BoardClass::Other(n) => format!("mainboard class {n}, which no table names"),
        }
    }
}

/// What the product form is read from, for one NPU.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Readings {
    /// The board's `PCI Device ID`, else the kernel's for the NPU's PCI function.
    pub pci_device_id: Option<u32>,
    /// `Main Board ID` and its `(<n>P)` suffix.
    pub main_board: Option<u32>,
    pub main_board_npus: Option<u32>,
    /// `-t spod-info`: its answer, or why it gave none.
    pub spod: Option<Result<SpodInfo, String>>,
}

/// Why no topology file is named, worded once (the detector's note quotes it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unresolved {
    /// Neither the board nor the kernel says the PCI device id.
    NoPciDeviceId,
    /// The PCI device id is not the 950's: its board ids mean something else.
    NotA950 { pci_device_id: u32 },
    /// `-t board` printed no `Main Board ID`.
    NoMainBoard,
    /// The 2P card, whose two published ids disagree and whose form has no file.
    TwoPCard { main_board: u32 },
    /// A card, equipment or other board no form names.
    UnknownBoard { main_board: u32, class: BoardClass },
    /// The card's `(<n>P)` suffix disagrees with its id.
    SuffixDisagrees { main_board: u32, npus: u32 },
    /// A server or pod board without a `Super Pod Type`: `-t spod-info` gave no answer
    /// (`answered` false; the detector's super-pod note says why), or one without the line.
    NoPodType { main_board: u32, answered: bool },
    /// `Super Pod Type : 0`: an 8P server, or MindCluster's "abnormal" default.
    ZeroPodType { main_board: u32 },
    /// A `Super Pod Type` code no table names.
    UnknownPodType { main_board: u32, code: u32 },
    /// The board's class and the super-pod answer name different forms.
    Conflict {
        main_board: u32,
        class: BoardClass,
        said: String,
    },
}

impl fmt::Display for Unresolved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unresolved::NoPciDeviceId => f.write_str(
                "neither `npu-smi info -t board` nor the kernel says its PCI device id, so its board ids cannot be read as a 950's",
            ),
            Unresolved::NotA950 { pci_device_id } => write!(
                f,
                "its PCI device id is {pci_device_id:#06x}, not the 950's {PCI_DEVICE_950:#06x}, so its board ids are not a 950 mainboard's"
            ),
            Unresolved::NoMainBoard => {
                f.write_str("`npu-smi info -t board` prints no Main Board ID")
            }
            Unresolved::TwoPCard { main_board } => write!(
                f,
                "Main Board ID {main_board:#04x} is a 2P card: the driver's 0x6a and MindCluster's 0x6b disagree on its id, and no topology file is published for a 2P card"
            ),
            Unresolved::UnknownBoard { main_board, class } => write!(
                f,
                "Main Board ID {main_board:#04x} is {}, and no topology file is published for it",
                class.name()
            ),
            Unresolved::SuffixDisagrees { main_board, npus } => write!(
                f,
                "Main Board ID {main_board:#04x} is printed with the suffix ({npus}P), which is not that card's NPU count: a conflicting reading"
            ),
            Unresolved::NoPodType {
                main_board,
                answered,
            } => write!(
                f,
                "Main Board ID {main_board:#04x} is a server or pod board, whose form only its Super Pod Type says, and {}",
                if *answered {
                    "`npu-smi info -t spod-info` prints no Super Pod Type line"
                } else {
                    "`npu-smi info -t spod-info` gave no answer to read one from"
                }
            ),
            Unresolved::ZeroPodType { main_board } => write!(
                f,
                "Main Board ID {main_board:#04x} with Super Pod Type 0, which is both the 8P server's code and MindCluster's \"abnormal\" default, so it cannot tell an 8P server from a type not read"
            ),
            Unresolved::UnknownPodType { main_board, code } => write!(
                f,
                "Main Board ID {main_board:#04x} with Super Pod Type {code}, a code no table names"
            ),
            Unresolved::Conflict {
                main_board,
                class,
                said,
            } => write!(
                f,
                "Main Board ID {main_board:#04x} is {}, but {said}: a conflicting reading",
                class.name()
            ),
        }
    }
}

/// The 950 card forms by mainboard id (`0x68` 1P, `0x6C` 4P); the 2P ids are [`Unresolved`].
fn card(main_board: u32, npus: Option<u32>) -> Result<ProductType, Unresolved> {
    let (form, count) = match main_board {
        0x68 => (ProductType::Card1p, 1),
        0x6c => (ProductType::Card4p, 4),
        0x6a | 0x6b => return Err(Unresolved::TwoPCard { main_board }),
        _ => {
            return Err(Unresolved::UnknownBoard {
                main_board,
                class: BoardClass::Card,
            });
        }
    };
    match npus {
        Some(n) if n != count => Err(Unresolved::SuffixDisagrees {
            main_board,
            npus: n,
        }),
        _ => Ok(form),
    }
}

/// The form a server or pod board's super-pod type names, checked against its class.
fn by_pod_type(
    main_board: u32,
    class: BoardClass,
    facts: &SpodFacts,
) -> Result<ProductType, Unresolved> {
    let Some(code) = facts.pod_type else {
        return Err(Unresolved::NoPodType {
            main_board,
            answered: true,
        });
    };
    if code == 0 {
        return Err(Unresolved::ZeroPodType { main_board });
    }
    let Some(form) = ProductType::from_code(code) else {
        return Err(Unresolved::UnknownPodType { main_board, code });
    };
    let fits = match form {
        ProductType::Pod1d | ProductType::Pod2d => class == BoardClass::Pod,
        ProductType::Server8p | ProductType::Server16p | ProductType::Server32p => {
            matches!(class, BoardClass::AplusK | BoardClass::AplusX)
        }
        ProductType::Card1p | ProductType::Card4p => false,
    };
    if !fits {
        return Err(Unresolved::Conflict {
            main_board,
            class,
            said: format!("its Super Pod Type {code} is {}", form.name()),
        });
    }
    Ok(form)
}

/// The NPU's product form, or why it has none.
pub fn resolve(r: &Readings) -> Result<ProductType, Unresolved> {
    let pci = r.pci_device_id.ok_or(Unresolved::NoPciDeviceId)?;
    if pci != PCI_DEVICE_950 {
        return Err(Unresolved::NotA950 { pci_device_id: pci });
    }
    let main_board = r.main_board.ok_or(Unresolved::NoMainBoard)?;
    let class = BoardClass::of(main_board);
    match class {
        BoardClass::Card => {
            let form = card(main_board, r.main_board_npus)?;
            // A card answers the spod query with its refusal; a type it does print must agree.
            if let Some(Ok(SpodInfo::Read(SpodFacts {
                pod_type: Some(code),
                ..
            }))) = &r.spod
                && *code != form.code()
            {
                return Err(Unresolved::Conflict {
                    main_board,
                    class,
                    said: format!("its Super Pod Type is {code}, not {}'s {}", form.name(), form.code()),
                });
            }
            Ok(form)
        }
        BoardClass::Pod | BoardClass::AplusK | BoardClass::AplusX => match &r.spod {
            Some(Ok(SpodInfo::Read(facts))) => by_pod_type(main_board, class, facts),
            Some(Ok(SpodInfo::NotSupported)) => Err(Unresolved::Conflict {
                main_board,
                class,
                said: "`npu-smi info -t spod-info` answers that the device does not support it, as a card does".into(),
            }),
            Some(Err(_)) | None => Err(Unresolved::NoPodType {
                main_board,
                answered: false,
            }),
        },
        BoardClass::Equipment | BoardClass::Other(_) => {
            Err(Unresolved::UnknownBoard { main_board, class })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(main_board: u32, pod_type: Option<u32>) -> Readings {
        Readings {
            pci_device_id: Some(PCI_DEVICE_950),
            main_board: Some(main_board),
            main_board_npus: None,
            spod: Some(Ok(SpodInfo::Read(SpodFacts {
                size: Some(16),
                id: Some(0),
                server_index: Some(0),
                pod_type,
                ..SpodFacts::default()
            }))),
        }
    }

    #[test]
    fn every_form_names_its_file_and_code() {
        for form in ALL {
            assert_eq!(ProductType::from_name(form.name()), Some(form));
            assert_eq!(ProductType::from_code(form.code()), Some(form));
            assert!(form.topology_file().ends_with(".json"));
        }
        assert_eq!(
            ProductType::Server16p.topology_file(),
            "/usr/local/Ascend/driver/topo/950/atlas_850_2.json"
        );
        assert_eq!(BoardClass::of(0x68), BoardClass::Card);
        assert_eq!(BoardClass::of(0x23), BoardClass::AplusK);
        assert_eq!(BoardClass::of(0x48), BoardClass::AplusX);
        assert_eq!(BoardClass::of(0x07), BoardClass::Pod);
        assert_eq!(BoardClass::of(0xc2), BoardClass::Equipment);
    }

    #[test]
    fn cards_by_id_servers_and_pods_by_type() {
        let card = Readings {
            pci_device_id: Some(PCI_DEVICE_950),
            main_board: Some(0x68),
            main_board_npus: Some(1),
            spod: Some(Ok(SpodInfo::NotSupported)),
        };
        assert_eq!(resolve(&card), Ok(ProductType::Card1p));
        assert_eq!(resolve(&server(0x23, Some(3))), Ok(ProductType::Server16p));
        assert_eq!(resolve(&server(0x42, Some(4))), Ok(ProductType::Server32p));
        assert_eq!(resolve(&server(0x07, Some(1))), Ok(ProductType::Pod1d));
        assert_eq!(resolve(&server(0x03, Some(2))), Ok(ProductType::Pod2d));
    }

    #[test]
    fn unreadable_and_conflicting_readings_name_no_file() {
        assert_eq!(
            resolve(&server(0x23, Some(0))),
            Err(Unresolved::ZeroPodType { main_board: 0x23 })
        );
        for two in [0x6a, 0x6b] {
            let r = Readings {
                main_board: Some(two),
                main_board_npus: Some(2),
                ..server(0, None)
            };
            assert_eq!(resolve(&r), Err(Unresolved::TwoPCard { main_board: two }));
        }
        assert!(matches!(
            resolve(&server(0x07, Some(3))),
            Err(Unresolved::Conflict { .. })
        ));
        assert!(matches!(
            resolve(&server(0x23, Some(1))),
            Err(Unresolved::Conflict { .. })
        ));
        assert!(matches!(
            resolve(&server(0x23, None)),
            Err(Unresolved::NoPodType { .. })
        ));
        let no_type = Readings {
            spod: Some(Err(
                "npu-smi info -t spod-info -i 0: exited with status 255".into(),
            )),
            ..server(0x23, None)
        };
        assert!(matches!(
            resolve(&no_type),
            Err(Unresolved::NoPodType { .. })
        ));
        let not_950 = Readings {
            pci_device_id: Some(0xd500),
            ..server(0x68, None)
        };
        assert_eq!(
            resolve(&not_950),
            Err(Unresolved::NotA950 {
                pci_device_id: 0xd500
            })
        );
        let no_board = Readings {
            main_board: None,
            ..server(0, Some(3))
        };
        assert_eq!(resolve(&no_board), Err(Unresolved::NoMainBoard));
        let suffix = Readings {
            main_board: Some(0x68),
            main_board_npus: Some(4),
            ..server(0, None)
        };
        assert_eq!(
            resolve(&suffix),
            Err(Unresolved::SuffixDisagrees {
                main_board: 0x68,
                npus: 4
            })
        );
        let card_as_server = Readings {
            main_board: Some(0x6c),
            ..server(0, Some(3))
        };
        assert!(matches!(
            resolve(&card_as_server),
            Err(Unresolved::Conflict { .. })
        ));
        assert!(matches!(
            resolve(&server(0xc0, Some(3))),
            Err(Unresolved::UnknownBoard { .. })
        ));
        assert!(matches!(
            resolve(&server(0x23, Some(9))),
            Err(Unresolved::UnknownPodType { code: 9, .. })
        ));
        assert_eq!(
            resolve(&Readings::default()),
            Err(Unresolved::NoPciDeviceId)
        );
    }
}
